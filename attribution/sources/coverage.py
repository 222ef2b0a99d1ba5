"""What both readers (text files, journals) share to report a source's coverage entry."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

MAX_NOTES = 10  # notes kept in one coverage entry; the rest are counted


@dataclass(slots=True)
class Span:
    """The first and last time a source is known to have been recording (its stamped lines, or
    a journal's entries of any kind): ``Coverage.first_at``/``last_at``."""

    first: datetime | None = None
    last: datetime | None = None

    def add(self, when: datetime | None) -> None:
        if when is None:
            return
        if self.first is None or when < self.first:
            self.first = when
        if self.last is None or when > self.last:
            self.last = when
