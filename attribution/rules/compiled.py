"""The compiled rule set the pure stages run on: types only, no file reading.

``attribution.rules.loader`` builds these from rule directories; extract, correlate,
diagnose, lint and analyze take them as input. Keeping them here lets the pure stages
depend on the types without depending on the module that reads files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attribution import __version__
from attribution._yaml import LineMap
from attribution.model import Stream
from attribution.rules.schema import (
    CorrelationRule,
    DiagnosisRule,
    ExtractorRule,
    FieldSpec,
    Rule,
    Table,
)


@dataclass(slots=True)
class CompiledExtractor:
    """An extractor ready to run: compiled regex, literals, field specs, table index."""

    rule: ExtractorRule
    regex: Any  # a compiled ``regex`` pattern (searched with a time budget)
    literals: tuple[str, ...]
    streams: frozenset[Stream]
    fields: dict[str, FieldSpec]
    table: dict[str, dict[str, Any]] | None
    path: str
    literals_folded: tuple[str, ...] = ()
    reads_info: bool = False  # may read NCCL INFO lines: a context extractor or match.nccl_info

    @property
    def id(self) -> str:
        return self.rule.id


@dataclass(slots=True)
class Source:
    """Where a rule came from (for error messages and ``sattr rules``)."""

    path: str
    lines: LineMap
    origin: str  # the directory it was loaded from


@dataclass(slots=True)
class RuleSet:
    """Every loaded rule, compiled, plus a digest that identifies the set exactly."""

    extractors: list[CompiledExtractor] = field(default_factory=list)
    correlations: list[CorrelationRule] = field(default_factory=list)
    diagnoses: list[DiagnosisRule] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)
    sources: dict[str, Source] = field(default_factory=dict)
    digest: str = ""
    directories: tuple[str, ...] = ()

    @property
    def version(self) -> str:
        return f"{__version__}+{self.digest[:12]}"

    def info(self) -> dict[str, str]:
        return {"version": self.version, "digest": self.digest}

    def rule(self, rule_id: str) -> Rule | None:
        """The loaded rule with this id, of any kind."""
        for rule in self.all_rules():
            if rule.id == rule_id:
                return rule
        return None

    def all_rules(self) -> list[Rule]:
        """Every loaded rule: extractors, then correlations, then diagnoses."""
        out: list[Rule] = [e.rule for e in self.extractors]
        out.extend(self.correlations)
        out.extend(self.diagnoses)
        return out
