"""A node goes away or its environment is broken: node failure with a reboot and NODE_FAIL
(CHAINS.md §10), a /dev/shm too small for NCCL (real-case01).
"""

from __future__ import annotations

from attribution.sim.background import boot_lines
from attribution.sim.cascade import (
    fail_job,
    peer_remote_error,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import BOOT_MARK, Result, Sim


def _chain_node_failure(sim: Sim) -> Result:
    """CHAINS.md §10: node A stops (optionally after MCE / XID 79 / panic), reboots; NODE_FAIL."""
    o = Options("node_failure", sim.sc.fault.options, {"precursor": "none", "evidence": "banner"})
    if o["precursor"] not in ("none", "mce", "xid79", "panic"):
        raise ValueError("node_failure: precursor none|mce|xid79|panic")
    if o["evidence"] not in ("banner", "slurmctld", "failed_node"):
        raise ValueError("node_failure: evidence banner|slurmctld|failed_node")
    f = sim.sc.fault
    rng = sim.rng
    a = sim.node_named(f.node, avoid=[sim.nodes[0].name] if len(sim.nodes) > 1 else [])
    sim.quiet.add(a.name)
    if a.kfmt in ("raw", "dmesg_t"):
        # a ring-buffer dump only shows the current boot; a rebooted node's log is persistent
        a.kfmt, a.kfile = "journal", "kernel.log"
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    if o["precursor"] == "mce":
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: CPU 37: Machine Check Exception: 5 Bank 7: be00000000800400",
        )
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffffa8a2b1c8> {intel_idle+0xa8/0x130}",
        )
        sim.kernel(
            a,
            t - 1,
            "mce: [Hardware Error]: TSC 2c4a3d1f77e PROCESSOR 0:806f8 TIME 1709547121 SOCKET 1 "
            "APIC 4a microcode 2b000571",
        )
        sim.kernel(a, t - 0.5, "mce: [Hardware Error]: Machine check: Processor context corrupt")
        sim.kernel(a, t, "Kernel panic - not syncing: Fatal machine check")
    elif o["precursor"] == "xid79":
        gpu = rng.randrange(sim.gpus)
        sim.kernel(
            a,
            t - 20,
            f"NVRM: Xid (PCI:{sim.bus(gpu)}): 79, pid='<unknown>', name=<unknown>, GPU has fallen "
            "off the bus.",
        )
        sim.kernel(a, t - 20, f"NVRM: GPU {sim.bus(gpu)}.0: GPU has fallen off the bus.")
        for i in range(4):
            sim.kernel(
                a,
                t - 15 + i * 3,
                f"INFO: task python:{sim.pid(sim.ranks_of(a)[gpu])} blocked for more than 120 "
                "seconds.",
            )
    elif o["precursor"] == "panic":
        sim.kernel(
            a,
            t - 0.2,
            f"BUG: unable to handle page fault for address: ffff{rng.getrandbits(44):012x}",
        )
        sim.kernel(a, t - 0.2, "#PF: supervisor read access in kernel mode")
        sim.kernel(a, t - 0.1, "Oops: 0000 [#1] SMP NOPTI")
        sim.kernel(
            a,
            t - 0.1,
            f"CPU: 17 PID: {rng.randrange(1000, 90000)} Comm: kworker/17:2 Tainted: P           "
            f"OE     {sim.kernel_release} #115-Ubuntu",
        )
        sim.kernel(a, t, "Kernel panic - not syncing: Fatal exception")
    # peers: NCCL loses A (its HCA stopped answering)
    failed: dict[int, int] = {}
    for peer in sim.sample_peers([a])[:8]:
        for r in list(sim.ranks_of(peer))[:1]:
            peer_remote_error(sim, r, t + rng.uniform(8, 25), a, "ib12")
            failed[r] = -6
    down = t + rng.uniform(120, 300)  # SlurmdTimeout
    batch = sim.nodes[0]
    sim.out(down + 1, f"srun: error: Node failure on {a.name}")
    if batch is not a:
        sim.out(
            down + 2,
            f"slurmstepd: error: *** JOB {sim.job_id} ON {batch.name} CANCELLED AT "
            f"{sim.iso_local(down + 2, batch)} DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS "
            "***",
        )
    sim.out(down + 3, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
    if o["evidence"] == "slurmctld":
        sim.ctld(down, f"error: Nodes {a.name} not responding, setting DOWN")
        sim.ctld(down + 0.1, f"Killing JobId={sim.job_id} on failed node {a.name}")
    boot = down + rng.uniform(60, 400)
    if a.kfmt == "journal":
        a.kernel_lines.append((boot - 0.001, sim.next_seq(), BOOT_MARK))
    boot_lines(sim, a, boot, flaps=True)
    extra = {"failed_node": a.name} if o["evidence"] == "failed_node" else {}
    sub, acc, cause, why = {
        "none": (
            ("hardware", ["infrastructure"], "node-crashed-silently")
            if o["evidence"] == "slurmctld"
            else ("infrastructure", ["hardware"], "node.failure")
        )
        + (
            f"{a.name} stopped logging mid-job with no error and came back with a new boot; "
            "Slurm ended the job NODE_FAIL and peers lost its address. Node loss without a "
            "recorded cause is infrastructure (CHAINS.md §10), except when slurmctld's record "
            "and the node's own boot agree that it stopped dead and came back by itself: a "
            "silent crash of the node, hardware (issue 10).",
        ),
        "mce": (
            "hardware",
            [],
            "kernel.mce",
            f"{a.name}'s last boot ended with a fatal machine check (MCE, 'Processor context "
            "corrupt' -> panic); it rebooted and Slurm ended the job NODE_FAIL "
            "(CHAINS.md §10: upgrade to hardware when the previous boot ends with MCE).",
        ),
        "xid79": (
            "hardware",
            [],
            "xid.79",
            f"A GPU of {a.name} fell off the bus (XID 79), the node hung (blocked tasks) and "
            "rebooted; Slurm ended the job NODE_FAIL (CHAINS.md §10 with §1).",
        ),
        "panic": (
            "system_software",
            ["hardware"],
            "kernel.panic",
            f"{a.name}'s kernel oopsed and panicked ('Fatal exception') in a kernel thread, "
            "then the node rebooted and Slurm ended the job NODE_FAIL. CHAINS.md §10 makes a "
            "captured kernel panic system_software; a hardware trigger cannot be excluded.",
        ),
    }[o["precursor"]]
    exp = expect(sim, "fail", sub, [a], cause, why, acceptable=acc)
    needs = [("kernel", a.name)] if o["precursor"] != "none" or o["evidence"] == "banner" else []
    # trusted evidence names the node: the controller's log, Slurm's FailedNode, the kernel's
    # last words, or the reboot banner inside the window (300 s after the job's end)
    end = down + 35
    confirmed = (
        {a.name}
        if o["evidence"] != "banner" or o["precursor"] != "none" or boot <= end + 300
        else set()
    )
    return Result(end, "NODE_FAIL", "0:0", exp, extra, needs=needs, confirmed=confirmed)


def _chain_nccl_shm(sim: Sim) -> Result:
    """real-case01 / catalog nccl shm: /dev/shm too small on node A -> ncclSystemError at init."""
    f = sim.sc.fault
    Options("nccl_shm", f.options, {})
    a = sim.node_named(f.node)
    rng = sim.rng
    t = sim.t0 + rng.uniform(20, 60)
    ready = job_start(sim, init=False)
    for node in sim.nodes:
        r0 = node.index * sim.rpn
        sim.nccl(r0, ready + 0.2, "INFO", f"Bootstrap : Using {node.netdev}:{node.ip}<0>")
    seg = "".join(
        rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        for _ in range(6)
    )
    size = rng.choice([7340384, 9437472, 33554464])
    for r in list(sim.ranks_of(a))[: 4 if len(sim.nodes) > 64 else sim.rpn]:
        sim.nccl(
            r,
            t,
            "WARN",
            f"Error while creating shared memory segment /dev/shm/nccl-{seg} (size {size})",
            tid_off=391,
            src="misc/shmutils.cc:86",
        )
        sim.rank_block(
            r,
            t + 0.3,
            [
                "torch.distributed.DistBackendError: NCCL error in: "
                "/pytorch/torch/csrc/distributed/c10d/"
                "NCCLUtils.hpp:268, unhandled system error (run with NCCL_DEBUG=INFO for "
                "details), NCCL "
                f"version {sim.nccl_version}",
                "ncclSystemError: System call (e.g. socket, malloc) or external library call "
                "failed or "
                "device error. ",
                "Last error:",
                f"Error while creating shared memory segment /dev/shm/nccl-{seg} (size {size})",
            ],
        )
    end = fail_job(sim, t + 1, list(sim.ranks_of(a))[:1], 1, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "system_software",
        [a],
        "nccl.shm_too_small",
        f"Only {a.name}'s ranks failed to create NCCL's /dev/shm segment "
        "(ncclSystemError at the first collective) while every other node initialised: "
        "that node's shared-memory setup is too small or full, an execution-environment "
        "problem (real-case01), not the job's code.",
    )
    return Result(end, "FAILED", "1:0", exp)


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "node_failure": _chain_node_failure,
    "nccl_shm": _chain_nccl_shm,
}
