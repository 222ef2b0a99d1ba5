"""GPU faults: fell off the bus (CHAINS.md §1), uncorrectable memory (§2), NVLink5 on
Blackwell (§3), GSP firmware timeouts (§13) and the application's illegal memory access (§14).
"""

from __future__ import annotations

from attribution.sim.cascade import (
    fail_job,
    teardown,
    traceback_lines,
    train_frames,
    watchdog,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import NVSWITCH_BUSES, Result, Sim


def _chain_gpu_fell_off_bus(sim: Sim) -> Result:
    """CHAINS.md §1: PCIe Surprise Down -> XID 79 on node A; peers fail in NCCL."""
    o = Options(
        "gpu_fell_off_bus", sim.sc.fault.options, {"aer": True, "hang": False, "nvswitch": True}
    )
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    bus = sim.bus(gpu)
    dom, b, _ = bus.split(":")
    port = f"{dom}:{int(b, 16) - 1:02x}:00.0"
    if o["aer"]:
        sim.kernel(a, t - 0.4, f"pcieport {port}: AER: Uncorrected (Fatal) error received: {port}")
        sim.kernel(
            a,
            t - 0.4,
            f"pcieport {port}: PCIe Bus Error: severity=Uncorrected (Fatal), "
            "type=Transaction Layer, (Receiver ID)",
        )
        sim.kernel(
            a, t - 0.4, f"pcieport {port}:   device [10b5:c010] error status/mask=00000020/00000000"
        )
        sim.kernel(a, t - 0.4, f"pcieport {port}:    [ 5] Surprise Down Error    (First)")
        sim.kernel(a, t - 0.3, f"nvidia {bus}.0: device has no AER-aware driver")
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    )
    sim.kernel(a, t, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    sim.kernel(a, t, "NVRM: A GPU crash dump has been created. If possible, please run")
    sim.kernel(a, t, "NVRM: nvidia-bug-report.sh as root to collect this data before")
    sim.kernel(a, t, "NVRM: the NVIDIA kernel module is unloaded.")
    if o["nvswitch"] and sim.has_fm:
        for sw in range(2):
            sim.kernel(
                a,
                t + 11.7 + sw * 0.004,
                f"nvidia-nvswitch{sw}: SXid (PCI:{NVSWITCH_BUSES[sw]}): 20034, Fatal, "
                f"Link {sim.rng.randrange(0, 64)} LTSSM Fault Up",
            )
    origin = sim.ranks_of(a)[gpu]
    if o["hang"]:
        seq = sim.last_seq + 1
        tw = t + sim.sc.pg_timeout
        failed: dict[int, int] = {}
        for peer in [a, *sim.sample_peers([a])]:
            for r in list(sim.ranks_of(peer))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
                if r == origin:
                    continue
                watchdog(sim, r, tw + sim.rng.uniform(0, 3), seq, seq)
                failed[r] = -6
        sim.c10(
            origin,
            tw + 60,
            "E",
            "ProcessGroupNCCL.cpp:1413",
            f"[PG ID 0 PG GUID 0(default_pg) Rank {origin}] Heartbeat monitor timed out! "
            "Process will be terminated after dumping debug info. workMetaList_.size()=1",
        )
        failed[origin] = -6
        end = teardown(sim, tw + 65, failed, first_node=a)
    else:
        sim.rank_block(
            origin,
            t + 0.8,
            traceback_lines(
                train_frames(
                    sim,
                    (
                        f"/home/{sim.sc.user}/run/model.py",
                        88,
                        "forward",
                        "return self.proj(x)",
                    ),
                ),
                "RuntimeError: CUDA error: unknown error",
            ),
        )
        sim.rank_block(
            origin,
            t + 0.8,
            [
                "CUDA kernel errors might be asynchronously reported at some other API call, so "
                "the "
                "stacktrace below might be incorrect.",
                "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            ],
        )
        end = fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "hardware",
        [a],
        "xid.79",
        f"GPU {bus} on {a.name} fell off the PCIe bus (XID 79"
        + (", right after a fatal PCIe Surprise Down on its root port" if o["aer"] else "")
        + "); every NCCL error on the other nodes comes after it (CHAINS.md §1).",
    )
    return Result(
        end, "FAILED", "1:0" if not o["hang"] else "134:0", exp, needs=[("kernel", a.name)]
    )


def _chain_gpu_memory_error(sim: Sim) -> Result:
    """CHAINS.md §2: XID 48 DBE -> 94 (contained) or 95 (uncontained) -> 63/64 -> 45/154."""
    o = Options(
        "gpu_memory_error", sim.sc.fault.options, {"containment": "contained", "remap": "pending"}
    )
    if o["containment"] not in ("contained", "uncontained") or o["remap"] not in (
        "pending",
        "failed",
        "none",
    ):
        raise ValueError(
            "gpu_memory_error: containment contained|uncontained, remap pending|failed|none"
        )
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    rng = sim.rng
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
        f"double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
        f"0x{rng.getrandbits(36):x} partition {rng.randrange(8)}, subpartition {rng.randrange(2)}.",
    )
    if o["containment"] == "contained":
        sim.kernel(
            a,
            t + 0.01,
            f"NVRM: Xid (PCI:{bus}): 94, pid={pid}, name=python, Contained: SM "
            "(0x1). RST: No, D-RST: No",
        )
    else:
        sim.kernel(
            a,
            t + 0.01,
            f"NVRM: Xid (PCI:{bus}): 95, pid={pid}, name=python, Uncontained: "
            "FBHUB. RST: Yes, D-RST: No",
        )
    if o["remap"] == "pending":
        sim.kernel(
            a,
            t + 0.02,
            f"NVRM: Xid (PCI:{bus}): 63, pid='<unknown>', name=<unknown>, Row "
            "Remapper: New row marked for remapping, reset gpu to activate.",
        )
    elif o["remap"] == "failed":
        sim.kernel(
            a,
            t + 0.02,
            f"NVRM: Xid (PCI:{bus}): 64, pid='<unknown>', name=<unknown>, Row "
            f"Remapper Error: (0x{rng.getrandbits(40):016x}) - All reserved rows for bank are "
            "remapped",
        )
    for ch in range(rng.randint(1, 3)):
        sim.kernel(
            a,
            t + 0.05 + ch * 0.01,
            f"NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=python, Ch {8 + ch:08x}",
        )
    to = (
        "0x1 (GPU Reset Required)" if o["containment"] == "uncontained" else "0x4 (Drain and Reset)"
    )
    sim.kernel(
        a,
        t + 0.1,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to {to}",
    )
    sim.rank_block(
        origin,
        t + 0.5,
        traceback_lines(
            train_frames(sim), "RuntimeError: CUDA error: uncorrectable ECC error encountered"
        ),
    )
    end = fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    kind = "contained (XID 94)" if o["containment"] == "contained" else "uncontained (XID 95)"
    exp = expect(
        sim,
        "fail",
        "hardware",
        [a],
        "xid.48",
        f"An uncorrectable HBM ECC error (XID 48) on GPU {bus} of {a.name}, {kind}, killed the "
        f"rank on that GPU; the row-remap XID and XID 45/154 follow it (CHAINS.md §2).",
    )
    return Result(end, "FAILED", "1:0", exp)


def _chain_nvlink5_fault(sim: Sim) -> Result:
    """CHAINS.md §3: Blackwell XID 149 (or a 145 storm) -> 154 -> 45 -> CUDA 220."""
    o = Options("nvlink5_fault", sim.sc.fault.options, {"code": 149})
    if o["code"] not in (149, 145):
        raise ValueError("nvlink5_fault: code is 149 or 145")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    gpu = f.gpu if f.gpu is not None else sim.rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    rng = sim.rng
    if o["code"] == 149:
        sim.kernel(
            a,
            t,
            f"NVRM: Xid (PCI:{bus}): 149, NETIR_LINK_EVT Fatal XC0 i0 Link {rng.randrange(18):02d} "
            f"({rng.choice(['0x004525c6', '0x021425c6'])} 0x00000000 0x00000000 0x00000000 "
            "0x00000000 0x00000000)",
        )
    else:
        for i in range(rng.randint(4, 9)):
            sim.kernel(
                a,
                t + i * 0.3,
                f"NVRM: Xid (PCI:{bus}): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 "
                "(0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
            )
    sim.kernel(
        a,
        t + 3,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x4 (Drain "
        "and Reset)",
    )
    for ch in range(rng.randint(2, 4)):
        sim.kernel(
            a,
            t + 3.1 + ch * 0.01,
            f"NVRM: Xid (PCI:{bus}): 45, pid={pid}, name=python, "
            f"Ch {ch + 1:08x} caused by previous Xid {o['code']}",
        )
    sim.kernel(
        a,
        t + 9,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x4 (Drain and Reset) to "
        "0x1 (GPU Reset Required)",
    )
    sim.rank_block(
        origin,
        t + 3.5,
        traceback_lines(
            train_frames(sim),
            "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
        ),
    )
    end = fail_job(sim, t + 4, [origin], 1, "closed", first_node=a)
    if o["code"] == 149:
        exp = expect(
            sim,
            "fail",
            "hardware",
            [a],
            "xid.149",
            f"GPU {bus} on {a.name} reported a fatal NVLink5 link event (XID 149 "
            "NETIR_LINK_EVT), then drain-and-reset/reset-required (XID 154) and XID 45 "
            "teardown; the rank saw CUDA error 220 (CHAINS.md §3).",
        )
    else:
        exp = expect(
            sim,
            "fail",
            "hardware",
            [a],
            "xid.145",
            f"A storm of non-fatal NVLink5 RLW_SRC_TRACK errors (XID 145) on GPU {bus} of "
            f"{a.name} tore down the job's channels (XID 45 'caused by previous Xid 145') "
            "and surfaced as CUDA error 220. CHAINS.md §3 marks these storms as contested "
            "(driver/fabric software suspected), so system_software is acceptable.",
            acceptable=["system_software"],
        )
    return Result(end, "FAILED", "1:0", exp)


def _chain_gsp_timeout(sim: Sim) -> Result:
    """CHAINS.md §13: repeated XID 119 GSP RPC timeouts -> GPU needs reset -> rank hangs."""
    f = sim.sc.fault
    Options("gsp_timeout", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    gpu = f.gpu if f.gpu is not None else rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    for i in range(rng.randint(3, 6)):
        fn = rng.choice(["76 (GSP_RM_CONTROL) (0x20800a4c 0x4)", "103 (GSP_RM_ALLOC) (0x2081 0x4)"])
        sim.kernel(
            a,
            t + i * 6.1,
            f"NVRM: Xid (PCI:{bus}): 119, pid={sim.pid(origin)}, name=python, Timeout "
            f"after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function {fn}.",
        )
    sim.kernel(
        a,
        t + 40,
        f"NVRM: Rate limiting GSP RPC error prints for GPU at PCI:{bus} (printing 1 of "
        "every 30).  The GPU likely needs to be reset.",
    )
    sim.kernel(
        a,
        t + 41,
        f"NVRM: Xid (PCI:{bus}): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU "
        "Reset Required)",
    )
    seq = sim.last_seq + 1
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    for node in [a, *sim.sample_peers([a])]:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            if r == origin:
                continue
            watchdog(sim, r, tw + rng.uniform(0, 3), seq, seq)
            failed[r] = -6
    failed[origin] = -6
    end = teardown(sim, tw + 5, failed, first_node=a)
    exp = expect(
        sim,
        "fail",
        "system_software",
        [a],
        "xid.119",
        f"GPU {bus} on {a.name} stopped answering driver RPCs (repeated XID 119 GSP "
        "timeouts, 'The GPU likely needs to be reset', XID 154); its rank hung and the "
        "others timed out (CHAINS.md §13: GSP firmware/driver, hardware if it recurs "
        "after a power cycle).",
        acceptable=["hardware"],
    )
    return Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


def _chain_illegal_address(sim: Sim) -> Result:
    """CHAINS.md §14: XID 13 burst + XID 43 (same pid) -> CUDA illegal memory access."""
    f = sim.sc.fault
    Options("illegal_address", f.options, {})
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    gpu = f.gpu if f.gpu is not None else rng.randrange(sim.gpus)
    ready = job_start(sim)
    t = fault_time(sim, ready, 0.05, 0.6)
    progress(sim, ready, t)
    bus = sim.bus(gpu)
    origin = sim.ranks_of(a)[gpu]
    pid = sim.pid(origin)
    for _ in range(rng.randint(2, 5)):
        sim.kernel(
            a,
            t,
            f"NVRM: Xid (PCI:{bus}): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp "
            f"Exception on (GPC {rng.randrange(8)}, TPC {rng.randrange(9)}, SM "
            f"{rng.randrange(2)}): "
            "Out Of Range Address",
        )
    sim.kernel(
        a,
        t,
        f"NVRM: Xid (PCI:{bus}): 13, pid='<unknown>', name=<unknown>, Graphics Exception: "
        "ESR 0x52df30=0x2000d 0x52df34=0x0 0x52df28=0x1f81fb60 0x52df2c=0x1174",
    )
    sim.kernel(a, t + 0.2, f"NVRM: Xid (PCI:{bus}): 43, pid={pid}, name=python, channel 0x00000012")
    sim.rank_block(
        origin,
        t + 0.5,
        traceback_lines(
            train_frames(sim), "RuntimeError: CUDA error: an illegal memory access was encountered"
        ),
    )
    sim.rank_block(
        origin,
        t + 0.5,
        [
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.",
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
        ],
    )
    end = fail_job(sim, t + 1, [origin], 1, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "application",
        [],
        "xid.13",
        f"The job's kernel on GPU {bus} of {a.name} faulted (XID 13 Out Of Range Address, "
        "then XID 43 for the same process) and the rank raised 'illegal memory "
        "access'. One occurrence on one job is the application (CHAINS.md §14); "
        "only a repeat across jobs would point at the GPU.",
    )
    return Result(end, "FAILED", "1:0", exp)


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "gpu_fell_off_bus": _chain_gpu_fell_off_bus,
    "gpu_memory_error": _chain_gpu_memory_error,
    "nvlink5_fault": _chain_nvlink5_fault,
    "gsp_timeout": _chain_gsp_timeout,
    "illegal_address": _chain_illegal_address,
}
