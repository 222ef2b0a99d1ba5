"""The access policy of ``sattr``: who the caller is and what of the stored verdicts they may see.

* Administrators (uid 0, or a member of one of the configuration's ``admin_groups``) see every
  job, every line of evidence, and may write bundles (which hold every job's node log lines).
* Everyone else sees only their own jobs: the record's uid is theirs, or, for a record stored
  without a uid, its user name is theirs. In their own verdicts, chain entries about another
  job (``owner: foreign``) keep their place, count and time but not their text or source.

The command line only asks this module; the store applies a ``VerdictFilter`` it is given.
"""

from __future__ import annotations

import dataclasses
import grp
import os
import pwd
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from attribution.model import ChainEntry, Verdict
from attribution.store import Owner, VerdictFilter

HIDDEN = "(a line about another job; shown to administrators only)"
HIDDEN_NOTE = "another job's"
HIDDEN_JOB = "(another job)"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who runs ``sattr``: ``uid``, user ``name`` (None when the uid has no passwd entry), and
    whether they are an administrator."""

    uid: int
    name: str | None
    admin: bool

    @classmethod
    def current(cls, admin_groups: Sequence[str]) -> Caller:
        """The process's real user, an administrator when root or in one of ``admin_groups``."""
        uid = os.getuid()
        try:
            name: str | None = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = None
        groups: set[str] = set()
        for gid in {os.getgid(), *os.getgroups()}:
            try:
                groups.add(grp.getgrgid(gid).gr_name)
            except KeyError:
                continue
        return cls(uid=uid, name=name, admin=uid == 0 or bool(groups & set(admin_groups)))

    def owns(self, uid: Any, user: Any) -> bool:
        """May the caller see a job of ``uid`` / ``user`` (as a record gives them: text or
        number, either possibly missing)?"""
        if self.admin:
            return True
        if uid is not None and str(uid).isdecimal():
            return int(uid) == self.uid
        return user is not None and user == self.name

    def visible(self, verdicts: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The stored verdicts (JSON objects, as ``Store.find`` returns them) the caller may see."""
        return [
            v
            for v in verdicts
            if self.owns((v.get("job") or {}).get("uid"), (v.get("job") or {}).get("user"))
        ]

    def restrict(self, selection: VerdictFilter) -> VerdictFilter:
        """``selection`` narrowed to the caller's own jobs unless they are an administrator."""
        if self.admin:
            return selection
        return dataclasses.replace(selection, owner=Owner(self.uid, self.name))

    def shown(self, verdict: Verdict) -> Verdict:
        """The verdict as the caller may read it: all of it for administrators, else
        ``for_owner``."""
        return verdict if self.admin else for_owner(verdict)


def for_owner(verdict: Verdict) -> Verdict:
    """The verdict as the job's owner may see it: lines about other jobs' processes and GPUs
    (chain entries owned by another job) keep their place, count and time, not their text,
    source or note (which names the other job's uid or cgroup); the other jobs that shared
    the job's nodes are counted, not named."""

    def hide(entries: tuple[ChainEntry, ...]) -> tuple[ChainEntry, ...]:
        return tuple(
            dataclasses.replace(e, example=HIDDEN, source="-", note=HIDDEN_NOTE)
            if e.owner == "foreign"
            else e
            for e in entries
        )

    return dataclasses.replace(
        verdict,
        symptom_chain=hide(verdict.symptom_chain),
        ignored=hide(verdict.ignored),
        ownership=_unnamed(verdict.ownership),
    )


def _unnamed(ownership: Mapping[str, Any]) -> dict[str, Any]:
    """``ownership`` with each node's ``other_jobs`` (job ids of other users, maybe) kept as a
    count: one ``HIDDEN_JOB`` per job."""
    out = dict(ownership)
    nodes = out.get("nodes")
    if isinstance(nodes, Mapping):
        out["nodes"] = {
            name: (
                {
                    **info,
                    "other_jobs": [HIDDEN_JOB] * len(info["other_jobs"]),
                }
                if isinstance(info, Mapping) and isinstance(info.get("other_jobs"), list | tuple)
                else info
            )
            for name, info in nodes.items()
        }
    return out


__all__ = ["HIDDEN", "HIDDEN_JOB", "HIDDEN_NOTE", "Caller", "for_owner"]
