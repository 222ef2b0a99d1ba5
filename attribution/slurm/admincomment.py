"""The one-line verdict written to a job's AdminComment, and the rules for writing it.

Format (version 1)::

    sattr1 <terminal_state> <sub_domain> [<cause id>] [nodes=<hostlist>]
    sattr1 fail hardware gpu-fell-off-bus nodes=node017

Lower case, no quotes, no control characters, one line, at most
``max_length`` bytes. The reasons are Slurm's (REPORT A3): ``sacctmgr`` on
22.05 lower-cases the value, every version turns quotes into backticks, and
values over 65,535 bytes are silently cut. The full verdict stays in SQLite.

Someone else's AdminComment (Princeton jobstats keeps ``JS1:...`` there) is
never overwritten: the worker skips the write or uses SystemComment, per
configuration, and records what it did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from attribution.hostlist import compress
from attribution.model import Verdict

PREFIX = "sattr1"
_OURS = re.compile(r"^sattr\d+(\s|:|$)", re.IGNORECASE)
_UNSAFE = re.compile(r"[^a-z0-9 ._,:=/\[\]+-]")

Field = Literal["AdminComment", "SystemComment"]


def clean_token(text: str) -> str:
    """Lower-case ``text`` and replace anything outside ``[a-z0-9 ._,:=/[]+-]`` with ``-``."""
    return _UNSAFE.sub("-", text.lower()).strip()


def format_admin_comment(verdict: Verdict, max_length: int = 256) -> str:
    """The AdminComment line for ``verdict``, at most ``max_length`` bytes (ASCII).

    When the node list does not fit it is cut and ends with ``+``.
    """
    words = [PREFIX, verdict.terminal_state.value, verdict.sub_domain.value]
    if verdict.cause is not None:
        words.append(clean_token(verdict.cause.id).replace(" ", "-"))
    head = " ".join(words)[:max_length]
    nodes = compress(dict.fromkeys(r.node for r in verdict.responsible))
    if not nodes:
        return head
    token = "nodes=" + clean_token(nodes).replace(" ", "")
    room = max_length - len(head) - 1
    if room < len("nodes=x+"):
        return head
    if len(token) > room:
        token = token[: room - 1] + "+"
    return f"{head} {token}"


def is_own_comment(text: str | None) -> bool:
    """True for an empty comment or one this tool wrote (``sattr<N> ...``)."""
    return not (text or "").strip() or bool(_OURS.match(text.strip()))  # type: ignore[union-attr]


@dataclass(frozen=True, slots=True)
class CommentPlan:
    """Where to write (``field``, ``None`` for nowhere) and the status to record."""

    field: Field | None
    status: str


def plan_comment(
    new: str,
    admin: str | None,
    system: str | None,
    mode: Literal["skip", "system_comment"],
) -> CommentPlan:
    """Decide where the verdict line goes, given the job's current comments.

    Statuses: ``written`` (AdminComment), ``unchanged`` (it already says
    this), ``system_comment`` (written to SystemComment because AdminComment
    is foreign), ``skipped-foreign`` (left alone).
    """
    if is_own_comment(admin):
        if (admin or "").strip().lower() == new:
            return CommentPlan(None, "unchanged")
        return CommentPlan("AdminComment", "written")
    if mode == "skip":
        return CommentPlan(None, "skipped-foreign")
    if is_own_comment(system):
        if (system or "").strip().lower() == new:
            return CommentPlan(None, "unchanged-system-comment")
        return CommentPlan("SystemComment", "system_comment")
    return CommentPlan(None, "skipped-foreign")


def parse_admin_comment(text: str) -> dict[str, str] | None:
    """Read a ``sattr1`` line back: ``terminal_state``, ``sub_domain``, ``cause``, ``nodes``.

    Returns ``None`` when the text is not ours.
    """
    words = text.strip().split()
    if not words or words[0].lower() != PREFIX:
        return None
    out: dict[str, str] = {"version": "1"}
    plain = [w for w in words[1:] if "=" not in w]
    for name, value in zip(("terminal_state", "sub_domain", "cause"), plain, strict=False):
        out[name] = value
    for word in words[1:]:
        if "=" in word:
            k, _, v = word.partition("=")
            out[k] = v
    return out


__all__ = [
    "PREFIX",
    "CommentPlan",
    "clean_token",
    "format_admin_comment",
    "is_own_comment",
    "parse_admin_comment",
    "plan_comment",
]
