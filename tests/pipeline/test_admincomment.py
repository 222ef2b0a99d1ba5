"""The one-line AdminComment: format, cap, and never overwriting someone else's."""

from __future__ import annotations

import dataclasses

import pytest

from attribution.model import (
    Cause,
    JobRecord,
    Responsible,
    SubDomain,
    TerminalState,
    Verdict,
)
from attribution.slurm.admincomment import (
    format_admin_comment,
    is_own_comment,
    parse_admin_comment,
    plan_comment,
)


def verdict(nodes: list[str], cause: str | None = "gpu-fell-off-bus") -> Verdict:
    return Verdict(
        job=JobRecord(job_id="1"),
        terminal_state=TerminalState.FAIL,
        sub_domain=SubDomain.HARDWARE,
        cause=Cause(cause, "t", f"{cause}@1") if cause else None,
        responsible=tuple(Responsible(n, "gpu", "0000:3b:00.0") for n in nodes),
        summary="s",
        action=None,
        symptom_chain=(),
        alternatives=(),
        coverage=(),
        ignored=(),
        window=(None, None),
        ruleset={},
        engine_version="0",
    )


def test_format() -> None:
    assert format_admin_comment(verdict(["node017"])) == (
        "sattr1 fail hardware gpu-fell-off-bus nodes=node017"
    )
    assert format_admin_comment(verdict(["gpu001", "gpu002", "gpu001"])) == (
        "sattr1 fail hardware gpu-fell-off-bus nodes=gpu[001-002]"
    )
    unattributed = dataclasses.replace(verdict([], None), sub_domain=SubDomain.UNATTRIBUTED)
    assert format_admin_comment(unattributed) == "sattr1 fail unattributed"


def test_safe_for_sacctmgr() -> None:
    line = format_admin_comment(verdict(["Node-A'1\"x\n"], cause='Weird "ID"\tX'))
    assert line == line.lower()
    assert not set("'\"\n\t`") & set(line)
    assert line.isascii()


@pytest.mark.parametrize("cap", [32, 40, 64, 256])
def test_cap(cap: int) -> None:
    nodes = [f"n{i:04d}" for i in range(0, 4000, 2)]
    line = format_admin_comment(verdict(nodes), cap)
    assert len(line.encode()) <= cap
    assert line.startswith("sattr1 fail hardware")
    if "nodes=" in line and len(line) == cap:
        assert line.endswith("+")


def test_own_or_foreign() -> None:
    assert is_own_comment(None)
    assert is_own_comment("")
    assert is_own_comment("sattr1 fail hardware x")
    assert is_own_comment("SATTR1 fail")
    assert not is_own_comment("js1:h4si...")
    assert not is_own_comment("sattrx")


@pytest.mark.parametrize(
    ("admin", "system", "mode", "field", "status"),
    [
        (None, None, "skip", "AdminComment", "written"),
        ("sattr1 fail application x", None, "skip", "AdminComment", "written"),
        ("sattr1 fail hardware y", None, "skip", None, "unchanged"),
        ("JS1:Short", None, "skip", None, "skipped-foreign"),
        ("js1:short", None, "system_comment", "SystemComment", "system_comment"),
        ("js1:short", "burst buffer says hi", "system_comment", None, "skipped-foreign"),
        ("js1:short", "sattr1 fail hardware y", "system_comment", None, "unchanged-system-comment"),
    ],
)
def test_plan(admin, system, mode, field, status) -> None:  # type: ignore[no-untyped-def]
    plan = plan_comment("sattr1 fail hardware y", admin, system, mode)
    assert (plan.field, plan.status) == (field, status)


def test_parse_back() -> None:
    parsed = parse_admin_comment("sattr1 fail hardware gpu-fell-off-bus nodes=node017")
    assert parsed == {
        "version": "1",
        "terminal_state": "fail",
        "sub_domain": "hardware",
        "cause": "gpu-fell-off-bus",
        "nodes": "node017",
    }
    assert parse_admin_comment("JS1:Short") is None
