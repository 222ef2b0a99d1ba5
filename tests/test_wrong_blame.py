"""Ways a healthy node could be blamed, found by breaking the ownership and trust checks on
purpose: each test changes one golden ownership-* bundle the way a user, a careless copy or an
odd log layout would, diagnoses it as an operator would, and checks that no node is blamed on
evidence that is not the job's, and that bad input is a one-line error."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from attribution.bundle import diagnose_bundle
from attribution.cli import main
from attribution.errors import BundleError
from attribution.model import SubDomain, Verdict
from attribution.rules.compiled import RuleSet

CASES = Path(__file__).parent / "cases"
XID79 = "NVRM: Xid (PCI:{bus}): 79, pid=61001, name=python, GPU has fallen off the bus."
HEAD = "2026-06-10T08:59:58.000000+00:00 {host} kernel: audit: hello\n"
TAIL = "2026-06-10T11:31:02.000000+00:00 {host} kernel: audit: bye\n"


def copy(tmp_path: Path, case: str) -> Path:
    out = tmp_path / case
    shutil.copytree(CASES / case, out)
    (out / "expected.yaml").unlink()
    return out


def edit_job(bundle: Path, **changes: Any) -> None:
    path = bundle / "job.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def kernel_log(host: str, *lines: str) -> str:
    body = "".join(f"2026-06-10T10:10:00.000000+00:00 {host} kernel: {x}\n" for x in lines)
    return HEAD.format(host=host) + body + TAIL.format(host=host)


def diagnose(bundle: Path, ruleset: RuleSet) -> Verdict:
    return diagnose_bundle(bundle, ruleset)[1]


def blamed(v: Verdict) -> list[str]:
    return [r.node for r in v.responsible]


def test_the_log_of_a_node_outside_the_job_is_never_its_evidence(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    b = copy(tmp_path, "ownership-xid79-own-gpu")
    (b / "nodes/gpu012/kernel.log").write_text(kernel_log("gpu012"))  # clean, recording
    outside = b / "nodes/gpu099"
    outside.mkdir()
    (outside / "kernel.log").write_text(kernel_log("gpu099", XID79.format(bus="0000:18:00")))
    v = diagnose(b, ruleset)
    assert blamed(v) == [] and v.sub_domain is not SubDomain.HARDWARE
    xids = [c for c in v.symptom_chain if c.event == "gpu.xid"]
    assert xids and all(c.owner == "foreign" and c.role.value == "context" for c in xids)
    assert "gpu099 is not one of the job's nodes" in (xids[0].note or "")


def test_an_xid_on_a_gpu_the_map_does_not_list_is_not_the_jobs(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    b = copy(tmp_path, "ownership-xid79-other-gpu")
    log = b / "nodes/gpu012/kernel.log"
    log.write_text(log.read_text().replace("PCI:0000:3a:00", "PCI:0000:b1:00"))
    v = diagnose(b, ruleset)
    assert blamed(v) == [] and v.sub_domain is SubDomain.APPLICATION
    xid = next(c for c in v.symptom_chain if c.event == "gpu.xid")
    assert xid.owner == "foreign" and "nor in gpu012's GPU map" in (xid.note or "")


def test_a_pid_claimed_in_the_jobs_output_does_not_blame_a_shared_node(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """Another process's segfault in libnccl, adopted by printing its pid in an NCCL prefix:
    the cause may be read, but the shared node is only a suspect."""
    b = copy(tmp_path, "ownership-foreign-segfault")
    out = b / "job/stdout.log"
    out.write_text(
        "gpu012:71234:71300 [0] NCCL INFO comm 0x5591a0 rank 0 nranks 2 cudaDev 0 busId 18000"
        " commId 0x4d1e - Init COMPLETE\n" + out.read_text()
    )
    v = diagnose(b, ruleset)
    assert blamed(v) == []
    assert v.confidence.level == "low" or v.sub_domain is SubDomain.UNATTRIBUTED
    # on a node the job had to itself the same pid is not needed: the kernel line is the job's
    edit_job(b, exclusive=True, other_jobs={})
    assert blamed(diagnose(b, ruleset)) == ["gpu012"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"other_jobs": {"gpu12": [{"job_id": "4243", "start": "2026-06-10T09:30:00Z"}]}},
            "other_jobs.gpu12: not one of the job's nodes",
        ),
        (
            {"gres_detail": {"GPU012": "gpu:h100:2(IDX:0-1)"}},
            "gres_detail.GPU012: not one of the job's nodes",
        ),
        (
            {
                "other_jobs": {
                    "gpu012": [
                        {
                            "job_id": "4243",
                            "start": "2026-06-10T11:00:00Z",
                            "end": "2026-06-10T09:00:00Z",
                        }
                    ]
                }
            },
            "other_jobs.gpu012: job 4243: end is before start",
        ),
        ({"uid": "9" * 5000}, "uid: a number of 5,000 digits is outside 0 to 4,294,967,295"),
        (
            {"restart_count": "9" * 30},
            "restart_count: a number of 30 digits is outside 0 to 65,535",
        ),
    ],
)
def test_per_node_facts_that_fit_no_node_are_refused(
    tmp_path: Path, ruleset: RuleSet, change: dict[str, Any], message: str
) -> None:
    b = copy(tmp_path, "ownership-foreign-segfault")
    edit_job(b, **change)
    with pytest.raises(BundleError) as caught:
        diagnose(b, ruleset)
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"job_id": 1' + "0" * 5000 + "}", "invalid JSON: a number of thousands of digits"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON: nested too deeply"),
    ],
)
@pytest.mark.parametrize("name", ["job.json", "bundle.json"])
def test_pathological_json_is_a_one_line_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    b = copy(tmp_path, "ownership-xid79-own-gpu")
    (b / name).write_text(text)
    result = CliRunner().invoke(main, ["diagnose", str(b)])
    assert result.exit_code == 1
    assert result.output.strip() == f"sattr: error: {b / name}: {message}"


def test_a_hardware_claim_only_the_output_of_a_multi_node_job_makes(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """No host prefix says which node: every node of the job is a suspect, and when each one's
    trusted kernel log was recording and shows nothing, the claim is contradicted."""
    b = copy(tmp_path, "ownership-forged-job-output")
    buses = ["0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0"]
    edit_job(
        b,
        nodes="gpu[012-013]",
        gres_detail={"gpu[012-013]": "gpu:h100:2(IDX:0-1)"},
        gpu_bus_ids={"gpu[012-013]": buses},
        other_jobs={},
    )
    (b / "job/stdout.log").write_text(
        "[2026-06-10 10:02:00,101] [INFO] step 200 loss 2.400\n"
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    for node in ("gpu012", "gpu013"):
        (b / "nodes" / node).mkdir(exist_ok=True)
        (b / "nodes" / node / "kernel.log").write_text(kernel_log(node))
    v = diagnose(b, ruleset)
    assert blamed(v) == [] and v.sub_domain is not SubDomain.HARDWARE
    assert any("contradicted" in a.why_not for a in v.alternatives)
    # without the kernel logs nothing contradicts it: unconfirmed, both nodes suspects
    shutil.rmtree(b / "nodes")
    v = diagnose(b, ruleset)
    assert v.sub_domain is SubDomain.HARDWARE and blamed(v) == []
    assert sorted(s.node for s in v.suspects) == ["gpu012", "gpu013"]
    assert v.confidence.level == "low" and v.action and "Do not drain" in v.action


def test_a_dmesg_beside_an_older_kern_log_is_read(tmp_path: Path, ruleset: RuleSet) -> None:
    """Two kernel logs that are not one log's rotations: neither says where the other ends."""
    b = copy(tmp_path, "ownership-xid79-own-gpu")
    node = b / "nodes/gpu012"
    (node / "kernel.log").rename(node / "dmesg.log")
    (node / "kernel.log").write_text(
        "2026-06-08T08:59:58.000000+00:00 gpu012 kernel: audit: hello\n"
        + TAIL.format(host="gpu012")
    )
    v = diagnose(b, ruleset)
    assert v.cause is not None and v.cause.id == "gpu-fell-off-bus"
    assert blamed(v) == ["gpu012"]


def test_a_kernel_line_that_cannot_be_placed_in_time_does_not_blame(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    """Uptime stamps and no boot time: the line may be from days before the job."""
    b = copy(tmp_path, "ownership-xid79-other-gpu")  # the job died of a KeyError
    (b / "nodes/gpu012/kernel.log").write_text(
        "[  345.678901] EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#0_DIMM#0\n"
    )
    v = diagnose(b, ruleset)
    assert blamed(v) == [] and v.sub_domain is SubDomain.APPLICATION
    edac = [c for c in v.symptom_chain if c.stream == "kernel"]
    assert edac and all(c.role.value == "context" for c in edac)
    assert "time unknown" in (edac[0].note or "")


def test_a_global_oom_kills_only_its_victims_job(tmp_path: Path, ruleset: RuleSet) -> None:
    b = copy(tmp_path, "ownership-foreign-cgroup-oom")  # job 4243 of uid 1002 was killed
    log = b / "nodes/gpu012/kernel.log"
    text = log.read_text().replace("CONSTRAINT_MEMCG", "CONSTRAINT_NONE")
    log.write_text(text.replace("oom_memcg=/slurm/uid_1002/job_4243,", "global_oom,"))
    v = diagnose(b, ruleset)
    assert blamed(v) == [] and v.sub_domain is SubDomain.APPLICATION
    kills = [c for c in v.symptom_chain if c.event == "kernel.oom_kill"]
    assert kills and all(c.owner == "foreign" for c in kills)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("job_4243", "job_5305"),  # this job's id, under another user's uid
        (
            "oom_memcg=/slurm/uid_1002/job_4243",
            "oom_memcg=/slurm/uid_1002/job_4243/step_0/job_5305",
        ),
    ],
)
def test_a_cgroup_path_is_the_jobs_only_when_all_of_it_agrees(
    tmp_path: Path, ruleset: RuleSet, old: str, new: str
) -> None:
    b = copy(tmp_path, "ownership-foreign-cgroup-oom")
    job_id = json.loads((b / "job.json").read_text())["job_id"]
    log = b / "nodes/gpu012/kernel.log"
    log.write_text(log.read_text().replace(old, new.replace("5305", job_id)))
    v = diagnose(b, ruleset)
    assert v.cause is not None and v.cause.id != "job-memory-limit"
    assert all(c.owner != "job" for c in v.symptom_chain if c.event.startswith("kernel.oom"))


def test_history_with_a_code_that_is_no_xid_is_a_one_line_error(tmp_path: Path) -> None:
    b = copy(tmp_path, "ownership-xid79-own-gpu")
    (b / "history.yaml").write_text("- {job: 1, node: gpu012, device: x, code: .inf}\n")
    result = CliRunner().invoke(main, ["diagnose", str(b)])
    assert result.exit_code == 1
    assert result.output.strip().endswith("bad history entry: code 'inf' is not an XID")


def test_a_compressed_log_is_read_whole(tmp_path: Path, ruleset: RuleSet) -> None:
    """(Redaction once read 1 MiB of it; the reader itself never did: keep it so.)"""
    b = copy(tmp_path, "ownership-xid79-own-gpu")
    log = b / "nodes/gpu012/kernel.log"
    filler = "".join(
        f"2026-06-10T09:{m:02d}:00.000000+00:00 gpu012 kernel: audit: filler {i}\n"
        for m in range(60)
        for i in range(400)
    )
    with gzip.open(b / "nodes/gpu012/kernel.log.gz", "wt") as out:
        out.write(filler + log.read_text())
    log.unlink()
    assert blamed(diagnose(b, ruleset)) == ["gpu012"]
