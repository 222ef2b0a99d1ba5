"""Read rule directories into a compiled ``RuleSet``, collecting every error with its file:line.

Directories are read in order; a rule in a later directory replaces the rule
with the same id from an earlier one (that is how a site overrides a shipped
rule). ``tables/*.yaml`` hold data tables; every other ``*.yaml`` file holds
exactly one rule. Nothing in a rule file is executed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import regex as regex_module
from pydantic import ValidationError

from attribution._yaml import LineMap, load_yaml
from attribution.errors import Location, RuleError, RuleErrors
from attribution.model import EventRole
from attribution.rules.compiled import CompiledExtractor, RuleSet, Source
from attribution.rules.schema import (
    CORRELATION_ADAPTER,
    MAX_RULE_FILE_BYTES,
    CorrelationRule,
    DiagnosisRule,
    ExtractorRule,
    Rule,
    Table,
)

_KINDS: dict[str, Callable[[Any], Rule]] = {
    "extractor": ExtractorRule.model_validate,
    # one class per ``op`` (a discriminated union): a key of another operator is an error
    "correlation": CORRELATION_ADAPTER.validate_python,
    "diagnosis": DiagnosisRule.model_validate,
}


def _loc_line(lines: LineMap, data: Any, loc: Sequence[str | int]) -> int:
    """Line of a pydantic error location; union-branch names that are not keys are skipped."""
    path: list[str | int] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            path.append(part)
            node = node[part]
        elif isinstance(node, dict) and part == "in_" and "in" in node:
            path.append("in")
            node = node["in"]
    return lines.line_for(path)


def _validation_errors(
    exc: ValidationError, path: str, lines: LineMap, data: Any
) -> list[RuleError]:
    out: list[RuleError] = []
    seen: set[tuple[int, str]] = set()
    for err in exc.errors():
        loc = [p for p in err["loc"] if isinstance(p, str | int)]
        if loc and isinstance(data, dict) and loc[0] == data.get("op") and loc[0] not in data:
            loc = loc[1:]  # the discriminated union's tag (the correlation op) is not a key
        line = _loc_line(lines, data, loc)
        where = ".".join(str(p) for p in loc if not (isinstance(p, str) and p[:1].isupper()))
        if err["type"] in ("union_tag_invalid", "union_tag_not_found"):
            line = lines.line_for(["op"])
            msg = f"op: {err['msg']}"
        elif err["type"] == "extra_forbidden":
            msg = f"unknown key {where!r}"
        else:
            msg = f"{where or 'document'}: {err['msg']}"
        if (line, msg) in seen:
            continue
        seen.add((line, msg))
        out.append(RuleError(msg, Location(path, line)))
    return out


def parse_rule_text(text: str, path: str) -> tuple[Rule, LineMap]:
    """Parse and validate one rule document.

    Raises:
        RuleErrors: every problem found, each with ``path:line``.
    """
    try:
        data, lines = load_yaml(text, path)
    except RuleError as exc:
        raise RuleErrors([exc]) from None
    if not isinstance(data, dict):
        raise RuleErrors([RuleError("a rule file must be a YAML mapping", Location(path, 1))])
    kind = data.get("kind")
    validate = _KINDS.get(kind) if isinstance(kind, str) else None
    if validate is None:
        line = lines.line_for(["kind"])
        raise RuleErrors(
            [
                RuleError(
                    f"'kind' must be one of {sorted(_KINDS)}, got {kind!r}", Location(path, line)
                )
            ]
        )
    try:
        rule = validate(data)
    except ValidationError as exc:
        raise RuleErrors(_validation_errors(exc, path, lines, data)) from None
    return rule, lines


def parse_table_text(text: str, path: str) -> tuple[Table, LineMap]:
    """Parse and validate one data table.

    Raises:
        RuleErrors: every problem found, each with ``path:line``.
    """
    try:
        data, lines = load_yaml(text, path)
    except RuleError as exc:
        raise RuleErrors([exc]) from None
    if not isinstance(data, dict):
        raise RuleErrors([RuleError("a table file must be a YAML mapping", Location(path, 1))])
    try:
        return Table.model_validate(data), lines
    except ValidationError as exc:
        raise RuleErrors(_validation_errors(exc, path, lines, data)) from None


def _too_big(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "groups nested too deep"
    if isinstance(exc, OverflowError):
        return "a repeat count is too large"
    return str(exc)


def compile_extractor(
    rule: ExtractorRule, path: str, lines: LineMap, tables: dict[str, Table]
) -> CompiledExtractor:
    """Compile an extractor's regex and check that every emitted group exists.

    Raises:
        RuleErrors: bad regex, unnamed groups, unknown groups or unknown table.
    """
    errors: list[RuleError] = []
    flags = regex_module.V0 | (regex_module.IGNORECASE if rule.match.ignore_case else 0)
    if rule.match.continuation:
        flags |= regex_module.DOTALL
    regex_line = lines.line_for(["match", "regex"])
    try:
        re.compile(rule.match.regex)  # the documented dialect is Python's re
        regex = regex_module.compile(rule.match.regex, flags)
    except (re.error, regex_module.error, OverflowError, RecursionError) as exc:
        # a repeat count beyond the engine's limit, or groups nested too deep to parse
        raise RuleErrors(
            [
                RuleError(
                    f"invalid regex: {getattr(exc, 'msg', None) or _too_big(exc)}"
                    + (
                        f" at position {pos}"
                        if (pos := getattr(exc, "pos", None)) is not None
                        else ""
                    ),
                    Location(path, regex_line),
                )
            ]
        ) from None
    if regex.groups != len(regex.groupindex):
        errors.append(
            RuleError(
                "regex uses unnamed groups; use (?P<name>...) or (?:...)",
                Location(path, regex_line),
            )
        )
    specs = rule.emit.field_specs()
    for name, spec in specs.items():
        groups = [spec.group] if isinstance(spec.group, str) else list(spec.group or [])
        for group in groups:
            if group not in regex.groupindex:
                errors.append(
                    RuleError(
                        f"field {name!r} uses group {group!r}, which the regex does not define",
                        Location(path, lines.line_for(["emit", "fields", name])),
                    )
                )
        for other in spec.ratio or ():
            if other not in specs or specs[other].ratio is not None:
                errors.append(
                    RuleError(
                        f"field {name!r} is a ratio of {other!r}, which is not a filled field",
                        Location(path, lines.line_for(["emit", "fields", name])),
                    )
                )
    table_index = None
    if rule.emit.lookup is not None:
        table = tables.get(rule.emit.lookup.table)
        if table is None:
            errors.append(
                RuleError(
                    f"unknown table {rule.emit.lookup.table!r}",
                    Location(path, lines.line_for(["emit", "lookup", "table"])),
                )
            )
        else:
            table_index = table.index()
        if rule.emit.lookup.key not in specs:
            errors.append(
                RuleError(
                    f"lookup key {rule.emit.lookup.key!r} is not an emitted field",
                    Location(path, lines.line_for(["emit", "lookup", "key"])),
                )
            )
    if errors:
        raise RuleErrors(errors)
    literals = tuple(rule.match.contains)
    return CompiledExtractor(
        rule=rule,
        regex=regex,
        literals=literals,
        streams=rule.stream_set(),
        fields=specs,
        table=table_index,
        path=path,
        literals_folded=tuple(s.lower() for s in literals) if rule.match.ignore_case else (),
        reads_info=rule.emit.role is EventRole.CONTEXT or rule.match.nccl_info,
    )


def shipped_rules_dir() -> Path:
    """The ruleset that ships with this package (wheel or source checkout)."""
    from attribution.paths import rules_dir

    return rules_dir()


def _duplicate(here: dict[str, Path], key: str, path: Path, errors: list[RuleError]) -> bool:
    """Record ``key`` as defined in ``path``; a second definition in the same directory is
    an error (overriding by id is only for a later directory: a site's over ours)."""
    first = here.setdefault(key, path)
    if first == path:
        return False
    errors.append(
        RuleError(f"{key!r} is already defined in {first}; ids must be unique", Location(str(path)))
    )
    return True


def load_ruleset(
    directories: Iterable[Path | str] | None = None, *, include_shipped: bool = True
) -> RuleSet:
    """Load and compile rules.

    Args:
        directories: extra rule directories (a site's own), applied after the
            shipped ones; a rule whose id already exists replaces it.
        include_shipped: load the rules that ship with attribution first.

    Returns:
        The compiled ``RuleSet``.

    Raises:
        RuleErrors: every problem in every file, each with ``file:line``.
    """
    dirs: list[Path] = []
    if include_shipped:
        dirs.append(shipped_rules_dir())
    dirs.extend(Path(d) for d in directories or ())
    errors: list[RuleError] = []
    tables: dict[str, Table] = {}
    raw_rules: dict[str, tuple[Rule, Source, str]] = {}
    for directory in dirs:
        if not directory.is_dir():
            errors.append(RuleError("not a rules directory", Location(str(directory))))
            continue
        files = sorted(p for p in directory.rglob("*.yaml") if p.is_file())
        here: dict[str, Path] = {}  # ids (and table names) defined in this directory
        for path in files:
            rel = path.relative_to(directory).parts
            if rel and rel[0] == "schema":
                continue
            try:
                if path.stat().st_size > MAX_RULE_FILE_BYTES:
                    errors.append(
                        RuleError(
                            f"larger than {MAX_RULE_FILE_BYTES >> 20} MiB; not a rule file",
                            Location(str(path)),
                        )
                    )
                    continue
                text = path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                errors.append(RuleError(f"cannot read rule file: {exc}", Location(str(path))))
                continue
            try:
                if rel and rel[0] == "tables":
                    table, _ = parse_table_text(text, str(path))
                    if _duplicate(here, f"table {table.table}", path, errors):
                        continue
                    tables[table.table] = table
                    continue
                rule, lines = parse_rule_text(text, str(path))
            except RuleErrors as exc:
                errors.extend(exc.errors)
                continue
            if _duplicate(here, rule.id, path, errors):
                continue
            raw_rules[rule.id] = (rule, Source(str(path), lines, str(directory)), text)
    ruleset = RuleSet(tables=tables, directories=tuple(str(d) for d in dirs))
    digest = hashlib.sha256()
    for name in sorted(tables):
        digest.update(tables[name].model_dump_json(by_alias=True).encode())
    for rule_id in sorted(raw_rules):
        rule, source, text = raw_rules[rule_id]
        digest.update(rule_id.encode() + b"\0" + text.encode() + b"\0")
        ruleset.sources[rule_id] = source
        if rule.status == "deprecated":
            continue
        if isinstance(rule, ExtractorRule):
            try:
                ruleset.extractors.append(
                    compile_extractor(rule, source.path, source.lines, tables)
                )
            except RuleErrors as exc:
                errors.extend(exc.errors)
        elif isinstance(rule, CorrelationRule):
            ruleset.correlations.append(rule)
        else:
            ruleset.diagnoses.append(rule)
    if errors:
        raise RuleErrors(errors)
    ruleset.digest = digest.hexdigest()
    return ruleset
