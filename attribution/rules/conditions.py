"""Evaluate the closed condition vocabulary against event fields and the job record.

A condition is a scalar (equals; strings compare case-insensitively) or an
``Ops`` object. Numbers given as strings in logs (``"79"``) compare as
numbers. Nothing is evaluated as code.
"""

from __future__ import annotations

import math
import operator
import signal
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import regex

from attribution.model import Event, EventRole, JobRecord
from attribution.ownership import job_gpu_count
from attribution.rules.schema import JobConditions, Ops, Scalar, Selector

# a condition's pattern has the same time budget as an extractor's (``extract.REGEX_BUDGET``,
# ``MAX_RULE_TIMEOUTS``): seconds for one value, and values it may run out of time on in one
# job before it is not tried again (it then holds for none)
CONDITION_BUDGET = 0.25
MAX_CONDITION_TIMEOUTS = 20


class PatternTimeout(Exception):
    """A condition's ``matches`` pattern ran out of time on a value (or was given up on)."""

    def __init__(self, pattern: str) -> None:
        super().__init__(pattern)
        self.pattern = pattern


# per job: (stream, node, pattern) -> values not tested; set by ``timeouts_recorded``
_TIMEOUTS: ContextVar[dict[tuple[str | None, str | None, str], int] | None] = ContextVar(
    "condition_timeouts", default=None
)


@contextmanager
def timeouts_recorded() -> Iterator[dict[tuple[str | None, str | None, str], int]]:
    """Within the block, count the values each condition pattern ran out of time on, by the
    stream and node of the event tested (``None`` for job and finding conditions), and give a
    pattern up after ``MAX_CONDITION_TIMEOUTS`` of them."""
    seen: dict[tuple[str | None, str | None, str], int] = defaultdict(int)
    token = _TIMEOUTS.set(seen)
    try:
        yield seen
    finally:
        _TIMEOUTS.reset(token)


def record_timeout(stream: str | None, node: str | None, pattern: str) -> None:
    seen = _TIMEOUTS.get()
    if seen is not None:
        seen[(stream, node, pattern)] += 1


def _given_up(pattern: str) -> bool:
    seen = _TIMEOUTS.get()
    if not seen:
        return False
    return sum(n for (_, _, p), n in seen.items() if p == pattern) >= MAX_CONDITION_TIMEOUTS


@lru_cache(maxsize=1024)
def _regex(pattern: str, ignore_case: bool) -> Any:
    return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)


def _search(pattern: str, ignore_case: bool, text: str) -> bool:
    """Does ``pattern`` occur in ``text``? Raises ``PatternTimeout`` when it cannot tell within
    ``CONDITION_BUDGET`` (a pattern that backtracks badly on a value a user wrote)."""
    if _given_up(pattern):
        raise PatternTimeout(pattern)
    try:
        return _regex(pattern, ignore_case).search(text, timeout=CONDITION_BUDGET) is not None
    except TimeoutError:
        raise PatternTimeout(pattern) from None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _equals(actual: Any, expected: Scalar) -> bool:
    if actual is None:
        return False
    if isinstance(expected, bool) or isinstance(actual, bool):
        return bool(actual) is expected if isinstance(expected, bool) else False
    a_num, e_num = _number(actual), _number(expected)
    if a_num is not None and e_num is not None:
        return a_num == e_num
    return str(actual).casefold() == str(expected).casefold()


def check(actual: Any, condition: Scalar | Ops) -> bool:
    """True when ``actual`` satisfies ``condition``."""
    if not isinstance(condition, Ops):
        return _equals(actual, condition)
    if condition.exists is not None and (actual is not None) is not condition.exists:
        return False
    if actual is None:
        # a value that is not there is "not in" any list; every other operator needs a value
        if condition.exists is False:
            return True
        only_not_in = condition.not_in is not None and all(
            getattr(condition, name) is None
            for name in ("in_", "gte", "lte", "gt", "lt", "contains", "matches", "exists")
        )
        return only_not_in
    if condition.in_ is not None and not any(_equals(actual, v) for v in condition.in_):
        return False
    if condition.not_in is not None and any(_equals(actual, v) for v in condition.not_in):
        return False
    bounds = (
        (condition.gte, operator.ge),
        (condition.lte, operator.le),
        (condition.gt, operator.gt),
        (condition.lt, operator.lt),
    )
    for bound, compare in bounds:
        if bound is None:
            continue
        number = _number(actual)
        if number is None or not compare(number, bound):
            return False
    text = str(actual)
    if condition.contains is not None:
        needle = condition.contains
        if condition.ignore_case:
            if needle.casefold() not in text.casefold():
                return False
        elif needle not in text:
            return False
    return condition.matches is None or _search(condition.matches, condition.ignore_case, text)


def check_all(values: Mapping[str, Any], where: Mapping[str, Scalar | Ops]) -> bool:
    """All conditions in ``where`` hold for ``values``."""
    return all(check(values.get(name), cond) for name, cond in where.items())


def event_values(event: Event) -> dict[str, Any]:
    """Fields a condition can test: the event's fields plus node, rank, stream, device."""
    values = dict(event.fields)
    values.setdefault("node", event.node)
    values.setdefault("rank", event.rank)
    values.setdefault("stream", event.stream.value)
    values.setdefault("device", event.device)
    values.setdefault("text", event.text)
    # whose it is (``attribution.ownership``): job, node, foreign or unknown; None until
    # assessed, and never "job" only because the job's own output claimed it
    owner = None if event.owner is None or event.owner_claimed else event.owner.value
    values.setdefault("owner", owner)
    return values


def named_nodes(event: Event) -> list[str]:
    """The nodes of the host list a line named when it named several (``named_nodes``, see
    ``Extractor._event``), in order; empty for a line about one node or none."""
    listed = event.fields.get("named_nodes")
    return [n for n in listed.split(",") if n] if isinstance(listed, str) else []


def event_rank(event: Event) -> int | None:
    """The global rank an event is about: the line's own rank, else a ``rank`` field."""
    rank = event.rank if event.rank is not None else event.fields.get("rank")
    try:
        return None if rank is None else int(rank)
    except (TypeError, ValueError):
        return None


def selects(selector: Selector, event: Event) -> bool:
    """Does ``selector`` pick ``event``?

    Events a correlation rule made downstream or context are only picked with
    ``include_demoted``.
    """
    if event.name not in selector.event:
        return False
    if (event.demoted_by or event.context_by) and not selector.include_demoted:
        return False
    if selector.roles and event.role not in selector.roles:
        return False
    if selector.during_job and not event.during_job:
        return False
    try:
        return check_all(event_values(event), selector.where)
    except PatternTimeout as slow:
        record_timeout(event.stream.value, event.node, slow.pattern)
        return False


def ending_signal(job: JobRecord) -> int | None:
    """The signal that ended the job's program, from Slurm's exit codes alone: ``0:11`` gives
    11; an exit status of 129-159 gives status-128 (how a shell reports a child it lost to a
    signal, ``139`` for SIGSEGV); else the derived exit code's signal. None when none says."""
    if job.exit_signal:
        return job.exit_signal
    status = job.exit_status
    if status is not None and 128 < status < 160:
        return status - 128
    derived = (job.derived_exit_code or "").partition(":")
    signal = _number(derived[2]) if derived[2] else None
    if signal:
        return int(signal)
    code = _number(derived[0]) if derived[0] else None
    if code is not None and 128 < code < 160:
        return int(code) - 128
    return None


def signal_name(number: int | None) -> str | None:
    """``SIGSEGV`` for 11: the C library's name of a Linux signal number (None if unknown)."""
    if number is None:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return None


def job_values(job: JobRecord) -> dict[str, Any]:
    """Job-record values a ``job:`` condition can test (names as in ``JobConditions``)."""
    derived = (job.derived_exit_code or "").partition(":")
    owner_cancel: bool | None = None
    if job.cancelled_by is not None and job.uid is not None:
        owner_cancel = str(job.cancelled_by) == str(job.uid)
    elif job.cancelled_by is not None and job.user is not None:
        owner_cancel = str(job.cancelled_by) == str(job.user)
    return {
        "state": job.state,
        "exit_status": job.exit_status,
        "exit_signal": job.exit_signal,
        "derived_status": _number(derived[0]) if derived[0] else None,
        "derived_signal": _number(derived[2]) if derived[2] else None,
        "signal": ending_signal(job),
        "num_nodes": len(job.nodes) if job.nodes else None,
        "duration": job.duration,
        "cancelled_by_owner": owner_cancel,
        "reason": job.reason,
        "gpus": job_gpu_count(job),
    }


def job_matches(job: JobRecord, conditions: JobConditions | None) -> bool:
    """All job conditions hold (``None`` means no conditions)."""
    if conditions is None:
        return True
    values = job_values(job)
    for name in JobConditions.model_fields:
        cond = getattr(conditions, name)
        if cond is None:
            continue
        if name == "cancelled_by_owner":
            if values[name] is not cond:
                return False
        else:
            try:
                if not check(values[name], cond):
                    return False
            except PatternTimeout as slow:
                record_timeout(None, None, slow.pattern)
                return False
    return True


ROOT_ROLES = frozenset({EventRole.ROOT, EventRole.EITHER})
