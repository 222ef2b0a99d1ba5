"""Rule versions that mean something: ``rules/VERSIONS.lock``.

Every shipped rule and table carries a ``version``. The lock file records, for each id and
each version ever shipped, a digest of the rule's *body*: the rule with the keys that do not
change what it does removed (``version``, ``status``, ``title``, ``description``,
``references``, ``tags``, ``replaced_by``, ``examples``), as canonical JSON. So:

- a rule whose body changes must get a new version (the old version's digest is kept);
- a verdict's ``rule: id@version`` names exactly one body, across releases;
- a rule id that is not in the lock yet is new and must be ``status: test`` (or
  ``experimental``) until it has earned ``stable``.

``sattr rules lock`` adds the entries of new versions; ``sattr rules lock --check`` (and the
test suite) fail when a body changed without a bump. The file is plain text, one line per
``id version digest``, sorted, so a review sees exactly what changed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attribution._yaml import load_yaml
from attribution.errors import Location, RuleError, RuleErrors
from attribution.rules.schema import ID_PATTERN, MAX_RULE_FILE_BYTES

LOCK_NAME = "VERSIONS.lock"
# keys that describe a rule or track its maturity without changing what it does
DOC_KEYS = frozenset(
    {"version", "status", "title", "description", "references", "tags", "replaced_by", "examples"}
)
DIGEST_HEX = 16
MAX_LOCK_BYTES = 4 << 20  # about 40,000 lines: a hundred versions of every rule
_ID = re.compile(ID_PATTERN)
_TABLE = re.compile(r"^[a-z][a-z0-9_]*$")  # as the table schema says

_HEADER = """\
# Rule and table versions: id, version, digest of the body (sha256 of the rule as canonical
# JSON without version/status/title/description/references/tags/replaced_by/examples).
# A body that changes needs a new version; old lines stay. Update with `sattr rules lock`.
# See docs/rules.md, "Versions".
"""


def body_digest(data: Mapping[str, Any]) -> str:
    """The digest of a rule's (or table's) body: what it does, not how it is described."""
    body = {k: v for k, v in data.items() if k not in DOC_KEYS}
    text = json.dumps(body, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_HEX]


@dataclass(frozen=True, slots=True)
class Body:
    """One rule or table file as it is now."""

    key: str  # the rule id, or ``table:<name>``
    version: int
    status: str | None
    digest: str
    where: Location  # the file and the line of its ``version``


Lock = dict[str, dict[int, str]]  # key -> version -> digest


def read_bodies(directory: Path) -> list[Body]:
    """The body of every rule and table file under a rules directory.

    Raises:
        RuleErrors: a file that cannot be read or parsed, or lacks an id or a version.
    """
    out: list[Body] = []
    errors: list[RuleError] = []
    first: dict[str, str] = {}  # key -> the file that defines it
    for path in sorted(p for p in directory.rglob("*.yaml") if p.is_file()):
        rel = path.relative_to(directory).parts
        if rel and rel[0] == "schema":
            continue
        try:
            if path.stat().st_size > MAX_RULE_FILE_BYTES:
                errors.append(RuleError("too large for a rule file", Location(str(path))))
                continue
            data, lines = load_yaml(path.read_text(encoding="utf-8"), str(path))
        except (OSError, UnicodeDecodeError) as exc:
            errors.append(RuleError(f"cannot read rule file: {exc}", Location(str(path))))
            continue
        except RuleError as exc:
            errors.append(exc)
            continue
        if not isinstance(data, dict):
            errors.append(RuleError("not a YAML mapping", Location(str(path), 1)))
            continue
        is_table = bool(rel) and rel[0] == "tables"
        name = data.get("table") if is_table else data.get("id")
        version = data.get("version")
        if not isinstance(name, str) or not (_TABLE if is_table else _ID).fullmatch(name):
            where = Location(str(path), lines.line_for(["table" if is_table else "id"]))
            errors.append(RuleError(f"{'table' if is_table else 'id'} is not a rule id", where))
            continue
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 10**6:
            where = Location(str(path), lines.line_for(["version"]))
            errors.append(RuleError("version must be a whole number from 1", where))
            continue
        key = f"table:{name}" if is_table else name
        if key in first:
            errors.append(RuleError(f"{key} is also defined in {first[key]}", Location(str(path))))
            continue
        first[key] = str(path)
        out.append(
            Body(
                key=key,
                version=version,
                status=None if is_table else str(data.get("status", "experimental")),
                digest=body_digest(data),
                where=Location(str(path), lines.line_for(["version"])),
            )
        )
    if errors:
        raise RuleErrors(errors)
    return out


def read_lock(path: Path) -> Lock:
    """Parse a lock file; a missing file is an empty lock.

    Raises:
        RuleErrors: a line that is not ``id version digest``, or a repeated id and version.
    """
    lock: Lock = {}
    try:
        if path.stat().st_size > MAX_LOCK_BYTES:
            raise RuleErrors(
                [RuleError(f"larger than {MAX_LOCK_BYTES >> 20} MiB", Location(str(path)))]
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return lock
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleErrors([RuleError(f"cannot read: {exc}", Location(str(path)))]) from None
    errors: list[RuleError] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if (
            len(parts) != 3
            or not (
                _TABLE.fullmatch(parts[0][6:])
                if parts[0].startswith("table:")
                else _ID.fullmatch(parts[0])
            )
            or not (parts[1].isascii() and parts[1].isdecimal() and len(parts[1]) <= 6)
            or len(parts[2]) != DIGEST_HEX
            or any(c not in "0123456789abcdef" for c in parts[2])
        ):
            errors.append(
                RuleError(
                    f"expected 'id version digest', got {line[:80]!r}", Location(str(path), number)
                )
            )
            continue
        versions = lock.setdefault(parts[0], {})
        version = int(parts[1])
        if version in versions:
            errors.append(
                RuleError(f"{parts[0]}@{version} is listed twice", Location(str(path), number))
            )
            continue
        versions[version] = parts[2]
    if errors:
        raise RuleErrors(errors)
    return lock


def format_lock(lock: Lock) -> str:
    """The lock as text: a header, then one sorted ``id version digest`` line per entry."""
    width = max((len(k) for k in lock), default=0)
    rows = [
        f"{key:<{width}} {version:>3} {digest}"
        for key in sorted(lock)
        for version, digest in sorted(lock[key].items())
    ]
    return _HEADER + "\n".join(rows) + "\n"


@dataclass(frozen=True, slots=True)
class Problem:
    """Why the rules and the lock disagree."""

    where: Location
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


def check(bodies: Iterable[Body], lock: Lock) -> tuple[list[Problem], Lock]:
    """Compare the rules with the lock.

    Returns:
        The problems that need a person (a body changed under the same version, a version
        that went back, a new rule marked stable) and the lock with every new version added.
    """
    problems: list[Problem] = []
    updated: Lock = {key: dict(versions) for key, versions in lock.items()}
    for body in bodies:
        known = lock.get(body.key, {})
        ref = f"{body.key}@{body.version}"
        if not known and body.status == "stable":
            problems.append(
                Problem(
                    body.where,
                    f"{body.key} is new: a new rule starts as status: test and becomes stable "
                    "once it has earned it (docs/rules.md, 'Versions')",
                )
            )
        locked = known.get(body.version)
        if locked is not None and locked != body.digest:
            problems.append(
                Problem(
                    body.where,
                    f"the body of {ref} changed ({locked} -> {body.digest}) but its version did"
                    f" not: set version: {max(known) + 1}",
                )
            )
            continue
        if known and body.version < max(known):
            problems.append(
                Problem(
                    body.where,
                    f"{ref} is older than {body.key}@{max(known)} in the lock; versions only go up",
                )
            )
            continue
        if locked is None:
            updated.setdefault(body.key, {})[body.version] = body.digest
    return problems, updated


def lock_path(directory: Path) -> Path:
    return directory / LOCK_NAME


@dataclass(frozen=True, slots=True)
class LockResult:
    """What ``sattr rules lock`` found: problems for a person, and the entries it adds."""

    problems: list[Problem]
    added: list[str]  # ``id@version`` not in the lock yet
    lock: Lock  # the lock with them added

    @property
    def stale(self) -> bool:
        return bool(self.problems or self.added)


def lock_status(directory: Path) -> LockResult:
    """Compare a rules directory with its ``VERSIONS.lock``.

    Raises:
        RuleErrors: a rule file or the lock cannot be read.
    """
    current = read_lock(lock_path(directory))
    problems, updated = check(read_bodies(directory), current)
    added = sorted(
        f"{key}@{version}"
        for key, versions in updated.items()
        for version in versions
        if version not in current.get(key, {})
    )
    return LockResult(problems, added, updated)


def write_lock(directory: Path, lock: Lock) -> None:
    """Write ``VERSIONS.lock`` (whole, through a temporary file in the same directory)."""
    path = lock_path(directory)
    temporary = path.with_name(path.name + ".tmp")
    try:
        temporary.write_text(format_lock(lock), encoding="utf-8")
        temporary.replace(path)
    except OSError as exc:
        raise RuleErrors(
            [RuleError(f"cannot write: {exc.strerror or exc}", Location(str(path)))]
        ) from None
