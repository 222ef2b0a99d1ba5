"""XID 13/31 repeat logic across jobs: verdicts record GPU errors, the store serves them back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from attribution.bundle import diagnose_bundle, load_bundle
from attribution.errors import BundleError
from attribution.history import priors_from_verdict_rows
from attribution.model import SubDomain
from attribution.rules.compiled import RuleSet
from attribution.store import Store

from .conftest import CASES, Diagnoses

APP_FAULT = CASES / "xid13-application-fault"


def test_verdicts_record_gpu_errors_per_gpu(diagnosed: Diagnoses) -> None:
    _, verdict = diagnosed(APP_FAULT)
    by_code = {g.code: g for g in verdict.gpu_errors}
    assert set(by_code) == {13, 43}
    assert by_code[13].node == "gpu-a01" and by_code[13].device == "0000:3b:00"
    assert by_code[13].unit == "GPC 1, TPC 3" and by_code[13].count == 2
    assert by_code[13].xid_class == "application"


def test_store_history_turns_a_repeat_into_hardware(
    tmp_path: Path, ruleset: RuleSet, diagnosed: Diagnoses
) -> None:
    """Two earlier jobs of other users faulted on the same GPU: this one is the GPU's fault."""
    _, base = diagnosed(APP_FAULT)
    store = Store(tmp_path / "v.sqlite")
    for job_id, user, name in (("700", "erin", "resnet"), ("701", "frank", "bert")):
        job = dataclasses.replace(base.job, job_id=job_id, user=user, name=name)
        store.save(dataclasses.replace(base, job=job))
    # the verdict of a job on other nodes by another user is not this GPU's history
    elsewhere = dataclasses.replace(
        base.job, job_id="702", user="gina", nodes=("gpu-b01",), nodelist="gpu-b01"
    )
    store.save(
        dataclasses.replace(
            base,
            job=elsewhere,
            gpu_errors=tuple(dataclasses.replace(g, node="gpu-b01") for g in base.gpu_errors),
        )
    )
    rows = store.gpu_history(base.job.nodes, base.job.user, None)
    assert {r["job"] for r in rows} == {"700", "701"}
    history = priors_from_verdict_rows(rows)
    _, verdict = diagnose_bundle(APP_FAULT, ruleset, history=history)
    assert verdict.cause is not None and verdict.cause.id == "gpu-fault-repeats-across-jobs"
    assert verdict.sub_domain is SubDomain.HARDWARE
    assert [(r.node, r.device) for r in verdict.responsible] == [("gpu-a01", "0000:3b:00")]
    assert "2 earlier job(s)" in verdict.summary and "2 on the same GPC/TPC" in verdict.summary
    # the same application's own earlier faults on this GPU are not another application's
    mine = dataclasses.replace(base.job, job_id="703")
    store.save(dataclasses.replace(base, job=mine))
    rows = store.gpu_history(("gpu-a01",), "dana", None)
    only_mine = [h for h in priors_from_verdict_rows(rows) if h.job == "703"]
    _, verdict = diagnose_bundle(APP_FAULT, ruleset, history=only_mine)
    assert verdict.cause is not None and verdict.cause.id == "illegal-memory-access"


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("- {job: 1, node: n1, device: x}\n", 1, "lacks code"),
        ("- {job: 1, node: n1, device: x, code: 13}\n- 7\n", 2, "must be a mapping"),
        ("- {job: 1, node: n1, device: x, code: 13, at: yesterday}\n", 1, "is not a time"),
        ("job: 1\n", 1, "must be a list"),
        ("- {job: 1, node: n1, device: x, code: thirteen}\n", 1, "bad history entry"),
    ],
)
def test_bad_history_file_names_file_and_line(
    tmp_path: Path, text: str, line: int, needle: str
) -> None:
    bundle = tmp_path / "b"
    (bundle / "job").mkdir(parents=True)
    (bundle / "job.json").write_text('{"job_id": "1", "state": "FAILED", "nodes": "n1"}')
    (bundle / "history.yaml").write_text(text)
    with pytest.raises(BundleError) as info:
        load_bundle(bundle)
    message = str(info.value)
    assert needle in message and f"history.yaml:{line}:" in message, message


def test_an_oversized_history_file_is_refused_before_parsing(tmp_path: Path) -> None:
    from attribution.historyfile import MAX_HISTORY_BYTES, read_history_file

    path = tmp_path / "history.yaml"
    with path.open("wb") as fh:  # sparse: no need to write the bytes
        fh.truncate(MAX_HISTORY_BYTES + 1)
    with pytest.raises(BundleError, match="larger than 8 MiB") as info:
        read_history_file(path)
    assert str(info.value).startswith(str(path))
