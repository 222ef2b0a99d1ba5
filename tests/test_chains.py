"""Each of the 16 cause->symptom chains of the knowledge base (CHAINS.md) has rules and golden cases.

For every chain: the diagnosis (or correlation) rules that implement it exist, and its golden
cases, hand-built bundles in tests/cases and named simulator scenarios in tests/sim/scenarios,
are diagnosed with one of those rules as the cause. test_golden and tests/sim check the rest
of each verdict (sub_domain, responsible node, terminal_state).
"""

from __future__ import annotations

import pytest

from attribution.model import Verdict
from attribution.rules.compiled import RuleSet
from attribution.sim import load_scenarios

from .conftest import CASES, TESTS, Diagnoses, Simulated

SCENARIOS = TESTS / "sim" / "scenarios"

# chain -> (rules that implement it, golden cases "case:<dir>" or "sim:<scenario>")
CHAINS: dict[str, tuple[set[str], list[str]]] = {
    "1 GPU falls off the bus (XID 79 after a PCIe Surprise Down)": (
        {"gpu-fell-off-bus", "pcie-fatal"},
        ["case:xid79-after-pcie-surprise-down", "sim:xid79-surprise-down-128n"],
    ),
    "2 uncorrectable GPU memory (48 -> 63/64; 94 contained vs 95 uncontained)": (
        {"gpu-uncorrectable-memory", "gpu-row-remap-failure", "gpu-ecc-seen-by-cuda"},
        [
            "case:xid48-dbe-then-row-remap",
            "case:xid94-contained-ecc",
            "case:xid95-uncontained",
            "sim:xid48-uncontained-remap-failed-32n",
        ],
    ),
    "3 NVLink5 fault (149/145 -> 154 -> 45; peer-side reason codes)": (
        {"nvlink-fault", "nvlink-peer-side-down", "gpu-nvlink-seen-by-cuda"},
        [
            "case:seed-nvlink-xid149-peers-nccl",
            "case:xid149-peer-side-down",
            "case:xid149-local-beats-peer-side",
            "sim:xid149-gb200-18n",
        ],
    ),
    "4 NVSwitch SXid + XID 74": (
        {"nvswitch-fatal", "nvlink-fault"},
        ["case:nvswitch-sxid-fatal-xid74", "sim:nvswitch-sxid24007-8n"],
    ),
    "5 Fabric Manager down -> CUDA 802; restarted -> NVLS failures": (
        {"fabricmanager-not-running", "nvls-multicast-failure"},
        ["case:fabricmanager-down-cuda-802", "case:real-case06", "sim:fm-restarted-nvls-8n"],
    ),
    "6 IB link flap with peer voting; fabric-wide RDMA failures": (
        {"ib-port-error", "ib-peer-suspect", "ib-fabric-unreachable", "nic-hardware-failure"},
        [
            "case:ib-link-flap-peer-vote",
            "sim:ib-peer-vote-origin-missing-16n",
            "sim:ib-init-config-32n",
        ],
    ),
    "7 rank crash -> peers see remote errors": (
        {"python-error", "program-crashed", "process-crash-gpu-library"},
        ["case:python-valueerror-first-rank", "case:segfault-sigsegv", "sim:segfault-libnccl-8n"],
    ),
    "8 GPU OOM vs cgroup OOM vs node OOM": (
        {
            "cuda-out-of-memory",
            "cuda-oom-other-process",
            "job-memory-limit",
            "job-out-of-memory-state",
            "node-out-of-memory",
        },
        [
            "case:real-case17",
            "case:cgroup-oom-slurm",
            "case:node-wide-oom",
            "sim:gpu-oom-leftover-process-8n",
        ],
    ),
    "9 watchdog timeout: straggler or hang": (
        {"straggler-rank", "collective-startup-barrier", "collective-hang"},
        ["case:watchdog-straggler-rank", "case:real-case08", "case:collective-timeout-unexplained"],
    ),
    "10 node failure / reboot -> NODE_FAIL": (
        {
            "node-not-responding",
            "job-node-fail",
            "node-rebooted",
            "node-kernel-panic",
            "node-memory-uncorrectable",
            "nvlink-fault",
        },
        ["case:node-fail-no-logs", "case:seed-reboot-xid145-node-fail", "sim:node-failure-mce-8n"],
    ),
    "11 preemption, time limit, user cancel": (
        {
            "preempted",
            "job-preempted-state",
            "time-limit",
            "cancelled-by-owner",
            "cancelled-by-admin",
        },
        [
            "case:preempted-by-scheduler",
            "case:time-limit-no-failure",
            "case:cancelled-by-owner",
            "sim:admin-cancel-16n",
        ],
    ),
    "12 shared file system stall or eviction": (
        {"shared-filesystem-failure", "filesystem-io-error"},
        ["case:lustre-eviction-checkpoint", "case:nfs-server-not-responding", "sim:nfs-hang-8n"],
    ),
    "13 GSP firmware hang (XID 119/120)": (
        {"gpu-gsp-failure"},
        ["case:gsp-timeout-xid119", "sim:gsp-xid119-16n"],
    ),
    "14 XID 13/31 -> 43: the application, or a GPU failing across jobs": (
        {"illegal-memory-access", "gpu-fault-repeats-across-jobs"},
        [
            "case:xid13-application-fault",
            "case:xid13-repeats-on-one-gpu",
            "case:xid13-follows-the-application",
            "sim:illegal-address-xid13-4n",
        ],
    ),
    "15 solo XID 45 vs XID 45 on job kill": (
        {"xid45-solo", "cancelled-by-owner"},
        ["case:xid45-solo-restart-fm", "case:xid45-after-user-cancel"],
    ),
    "16 rendezvous / startup failures": (
        {"rendezvous-timeout", "python-missing-module"},
        ["case:rendezvous-one-node-crashed-at-start", "case:rendezvous-timeout-unexplained"],
    ),
}

PARAMS = [
    pytest.param(chain, ref, id=f"{chain.split()[0]}-{ref}")
    for chain, (_, refs) in CHAINS.items()
    for ref in refs
]


def test_all_sixteen_chains_are_covered(ruleset: RuleSet) -> None:
    assert [int(c.split()[0]) for c in CHAINS] == list(range(1, 17))
    for chain, (rules, refs) in CHAINS.items():
        assert refs, chain
        missing = [r for r in rules if ruleset.rule(r) is None]
        assert not missing, f"{chain}: no rule {missing}"


def _verdict(ref: str, diagnosed: Diagnoses, simulated: Simulated) -> Verdict:
    """The default verdict of a golden case or a named scenario (each made once per run)."""
    kind, name = ref.split(":", 1)
    if kind == "case":
        return diagnosed(CASES / name)[1]
    (scenario,) = load_scenarios(SCENARIOS / f"{name}.yaml")
    return simulated(scenario)[2]


@pytest.mark.parametrize(("chain", "ref"), PARAMS)
def test_chain_case_is_diagnosed_by_the_chain(
    chain: str, ref: str, diagnosed: Diagnoses, simulated: Simulated
) -> None:
    rules, _ = CHAINS[chain]
    verdict = _verdict(ref, diagnosed, simulated)
    assert verdict.cause is not None, verdict.summary
    assert verdict.cause.id in rules, f"{ref}: {verdict.cause.id}: {verdict.summary}"
