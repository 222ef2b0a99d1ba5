"""The access policy (attribution.access) and the store's typed query (Store.query)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from attribution.access import HIDDEN, Caller
from attribution.bundle import diagnose_bundle
from attribution.model import Verdict
from attribution.rules.compiled import RuleSet
from attribution.store import Owner, Store, VerdictFilter

from .conftest import CASES

ADMIN = Caller(uid=0, name="root", admin=True)
ALICE = Caller(uid=1001, name="alice", admin=False)
BOB = Caller(uid=1002, name="bob", admin=False)


def test_owner_is_the_uid_else_the_user_name() -> None:
    assert ALICE.owns(1001, "someone-else")  # the uid decides when there is one
    assert ALICE.owns("1001", None)
    assert not ALICE.owns(1002, "alice")
    assert ALICE.owns(None, "alice") and not ALICE.owns(None, "bob")
    assert not ALICE.owns(None, None)
    assert ADMIN.owns(1002, "bob") and ADMIN.owns(None, None)


def test_visible_and_restrict() -> None:
    stored = [
        {"job": {"uid": 1001, "user": "alice"}},
        {"job": {"uid": 1002, "user": "bob"}},
        {"job": {"user": "alice"}},
        {"job": None},
        {},
    ]
    assert ALICE.visible(stored) == [stored[0], stored[2]]
    assert ADMIN.visible(stored) == stored
    selection = VerdictFilter(user="bob", limit=5)
    assert ADMIN.restrict(selection) == selection
    assert ALICE.restrict(selection) == dataclasses.replace(selection, owner=Owner(1001, "alice"))


def test_current_caller_is_this_process() -> None:
    import os

    caller = Caller.current([])
    assert caller.uid == os.getuid() and caller.admin == (os.getuid() == 0)


@pytest.fixture(scope="module")
def shared(ruleset: RuleSet) -> Verdict:
    """A job on a shared node whose chain holds another job's XIDs."""
    case = CASES / "blind10-shared-c12-own-xid31-illegal-address-foreign-xid94"
    return diagnose_bundle(case, ruleset)[1]


def test_owners_do_not_read_other_jobs_lines(shared: Verdict) -> None:
    foreign = [e for e in shared.symptom_chain if e.owner == "foreign"]
    assert foreign
    shown = ALICE.shown(shared)
    for before, after in zip(shared.symptom_chain, shown.symptom_chain, strict=True):
        if before.owner == "foreign":
            assert (after.example, after.source) == (HIDDEN, "-")
            assert (after.count, after.first_at, after.role) == (
                before.count,
                before.first_at,
                before.role,
            )
        else:
            assert after == before
    assert ADMIN.shown(shared) is shared


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, ruleset: RuleSet) -> Store:
    path: Path = tmp_path_factory.mktemp("store") / "v.sqlite"
    out = Store(path)
    for name in ("real-case11", "real-case07", "seed-nvlink-xid149-peers-nccl"):
        out.save(diagnose_bundle(CASES / name, ruleset)[1])
    return out


def ids(rows: list[dict[str, object]]) -> list[object]:
    return [r["display_id"] for r in rows]


def test_query_filters(store: Store) -> None:
    every = store.query()
    assert len(every) == 3 and all("verdict" not in r for r in every)
    ends = [r["end"] for r in every]
    assert ends == sorted(ends, reverse=True)  # newest first
    assert ids(store.query(VerdictFilter(order="job"))) == sorted(ids(every))
    assert ids(store.query(VerdictFilter(job="100011"))) == ["100011"]
    assert ids(store.query(VerdictFilter(nodes=("gb200-n02", "nowhere")))) == ["4242001"]
    assert ids(store.query(VerdictFilter(cause="gpu-fell-off-bus"))) == ["100011"]
    assert ids(store.query(VerdictFilter(sub_domain="HARDWARE"))) == ids(
        store.query(VerdictFilter(sub_domain="hardware"))
    )
    assert store.query(VerdictFilter(state="failed")) == store.query(VerdictFilter(state="FAILED"))
    assert len(store.query(VerdictFilter(limit=2))) == 2
    cut = datetime(2020, 1, 1, tzinfo=UTC)
    older = ids(store.query(VerdictFilter(until=cut)))
    newer = ids(store.query(VerdictFilter(since=cut)))
    assert "100011" in older and sorted(older + newer) == sorted(ids(every))
    assert store.query(VerdictFilter(owner=Owner(uid=-1, user=None))) == []
    for row in every:
        owner = Owner(uid=-1 if row["uid"] is None else int(str(row["uid"])), user=row["user"])
        expected = [
            r["display_id"]
            for r in every
            if r["uid"] == owner.uid or (r["uid"] is None and r["user"] == owner.user)
        ]
        assert ids(store.query(VerdictFilter(owner=owner))) == expected
    row = every[0]
    assert ids(store.query(VerdictFilter(user=str(row["user"])))) == [
        r["display_id"] for r in every if r["user"] == row["user"]
    ]
