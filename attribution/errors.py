"""The exception tree. Every error that reaches a user names the file and line it is about."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Location:
    """A place in a file: ``path`` and a 1-based ``line`` (0 when unknown)."""

    path: str
    line: int = 0

    def __str__(self) -> str:
        return f"{self.path}:{self.line}" if self.line else self.path


class AttributionError(Exception):
    """Base class for every error raised on purpose by this package.

    ``str(err)`` is always a single line suitable for a terminal or syslog.
    """

    def __init__(self, message: str, location: Location | None = None) -> None:
        self.message = " ".join(message.split())
        self.location = location
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.location is None:
            return self.message
        return f"{self.location}: {self.message}"


class ConfigError(AttributionError):
    """The site configuration file is missing, unreadable or invalid."""


class RuleError(AttributionError):
    """A rule file cannot be loaded: bad YAML, duplicate or unknown key, bad regex."""


class BundleError(AttributionError):
    """An evidence bundle is unusable (no ``job.json``, unparsable job record)."""


class SourceError(AttributionError):
    """A log source could not be read at all."""


class SlurmError(AttributionError):
    """A Slurm command failed or returned output we cannot parse."""


class SpoolError(AttributionError):
    """The spool directory is missing, unwritable or holds a malformed entry."""


class StoreError(AttributionError):
    """The verdict store cannot be opened, migrated or queried."""


class RuleErrors(RuleError):
    """Several rule errors collected from one load; ``errors`` holds each one."""

    def __init__(self, errors: list[RuleError]) -> None:
        self.errors = errors
        first = errors[0] if errors else RuleError("no errors")
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(first.message + more, first.location)


def one_line(text: str, limit: int = 300) -> str:
    """Text from outside (a server's answer, a file's value) as one printable line of at most
    ``limit`` characters, for a message or a coverage note."""
    printable = "".join(c if c.isprintable() else " " for c in text[: limit * 2])
    return " ".join(printable.split())[:limit]
