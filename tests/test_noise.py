"""Healthy-node noise (boot, link training, informational XID 63/92, corrected errors) never yields a
hardware verdict on its own, whatever the job state."""

from __future__ import annotations

from pathlib import Path

import pytest

from attribution.analyze import analyze
from attribution.jobrecord import job_from_dict
from attribution.model import Stream, SubDomain
from attribution.rules.compiled import RuleSet
from attribution.sources.readahead import read_sources
from attribution.sources.specs import ReadContext, SourceSpec

from .conftest import FIXTURES

BASELINE = FIXTURES / "baseline"


def _verdict(ruleset: RuleSet, state: str, exit_code: str, output: str | None, tmp_path: Path):  # type: ignore[no-untyped-def]
    job = job_from_dict(
        {
            "job_id": "4242",
            "state": state,
            "exit_code": exit_code,
            "nodes": "gpu-h01",
            "start": "2025-12-01T09:00:00",
            "end": "2025-12-01T11:00:00",
            "user": "gina",
            "uid": 1002,
        }
    )
    specs = [
        SourceSpec(Stream.KERNEL, "gpu-h01", [BASELINE / "kernel.log"]),
        SourceSpec(Stream.SYSLOG, "gpu-h01", [BASELINE / "syslog.log"]),
    ]
    if output is not None:
        out = tmp_path / "stdout.log"
        out.write_text(output)
        specs.append(SourceSpec(Stream.JOB_STDOUT, None, [out]))
    readers, lines = read_sources(specs, ReadContext(reference=job.start, job_nodes=job.nodes))
    return analyze(
        job,
        lines,
        ruleset,
        coverage=lambda: [c for r in readers for c in r.coverages()],
        silences=lambda: [x for r in readers for x in r.silences],
    )


@pytest.mark.parametrize(
    ("state", "exit_code"),
    [
        ("FAILED", "1:0"),
        ("FAILED", "0:9"),
        ("TIMEOUT", "0:0"),
        ("CANCELLED", "0:0"),
        ("OUT_OF_MEMORY", "0:125"),
        ("COMPLETED", "0:0"),
        ("NODE_FAIL", "0:0"),
    ],
)
def test_noise_alone_is_never_hardware(
    ruleset: RuleSet, state: str, exit_code: str, tmp_path: Path
) -> None:
    verdict = _verdict(
        ruleset, state, exit_code, "step 100 loss 2.1\nstep 200 loss 2.0\n", tmp_path
    )
    assert verdict.sub_domain is not SubDomain.HARDWARE, verdict.summary
    assert not verdict.responsible or state == "NODE_FAIL"


def test_noise_is_seen_and_kept_as_context(ruleset: RuleSet, tmp_path: Path) -> None:
    verdict = _verdict(ruleset, "FAILED", "1:0", None, tmp_path)
    assert verdict.sub_domain is SubDomain.UNATTRIBUTED
    symptoms = {e.event for e in verdict.symptom_chain}
    assert {"gpu.xid", "kernel.edac", "kernel.pcie_aer"} <= symptoms
    assert all(e.role.value == "context" for e in verdict.symptom_chain), verdict.symptom_chain
    assert any(
        e.event == "kernel.boot" for e in verdict.ignored
    )  # the boot was hours before the job


def test_no_error_grade_root_fires_on_baseline(ruleset: RuleSet, tmp_path: Path) -> None:
    """Like a benign-log run: nothing that could be a root cause at error severity."""
    verdict = _verdict(ruleset, "FAILED", "1:0", None, tmp_path)
    assert verdict.cause is None
    assert not verdict.alternatives, [a.cause.id for a in verdict.alternatives]
