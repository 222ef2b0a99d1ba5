"""NVLink fabric and network faults: NVSwitch fatal SXids (CHAINS.md §4), Fabric Manager
down or restarted (§5), InfiniBand/RoCE link flaps and fabric-wide RDMA misconfiguration (§6).
"""

from __future__ import annotations

from attribution.sim.cascade import (
    fail_job,
    peer_remote_error,
    teardown,
    traceback_lines,
    train_frames,
    watchdog,
)
from attribution.sim.families.base import ChainFn, Options, expect, fault_time
from attribution.sim.job import job_start, progress
from attribution.sim.state import HCA_BUSES, NVSWITCH_BUSES, Result, Sim


def _chain_nvswitch_fatal(sim: Sim) -> Result:
    """CHAINS.md §4: fatal SXid (+ Fabric Manager report) -> XID 74 -> collectives hang."""
    o = Options("nvswitch_fatal", sim.sc.fault.options, {"sxid": 24007})
    if o["sxid"] not in (24007, 12022, 20034):
        raise ValueError("nvswitch_fatal: sxid is 24007, 12022 or 20034")
    if not sim.has_fm:
        raise ValueError("nvswitch_fatal needs an NVSwitch platform (a100, h100, b200)")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    sw = rng.randrange(4)
    link = rng.randrange(8, 60)
    swbus = NVSWITCH_BUSES[sw]
    text = {
        24007: "sourcetrack timeout error (First)",
        12022: "egress input ECC DBE error",
        20034: "LTSSM Fault Up",
    }[o["sxid"]]
    sim.kernel(
        a, t, f"nvidia-nvswitch{sw}: SXid (PCI:{swbus}): {o['sxid']}, Fatal, Link {link} {text}"
    )
    sim.kernel(
        a,
        t,
        f"nvidia-nvswitch{sw}: SXid (PCI:{swbus}): {o['sxid']}, Severity 1 Engine instance {link} "
        "Sub-engine instance 00",
    )
    sim.fm(
        a,
        t + 0.5,
        "ERROR",
        f"detected NVSwitch fatal error {o['sxid']} on fid 0 on NVSwitch pci bus id "
        f"0000{swbus} physical id {sw} port {link}",
    )
    hb = (sw + 1) % 4
    sim.kernel(
        a,
        t + 0.8,
        f"nvidia-nvswitch{hb}: SXid (PCI:{NVSWITCH_BUSES[hb]}): 19084, Non-fatal, Link "
        f"{rng.randrange(8, 60)} AN1 Heartbeat Timeout Error (First)",
    )
    gpus = rng.sample(range(sim.gpus), k=min(2, sim.gpus))
    for g in gpus:
        sim.kernel(
            a,
            t + 1.2,
            f"NVRM: Xid (PCI:{sim.bus(g)}): 74, pid='<unknown>', name=<unknown>, NVLink: "
            f"fatal error detected on link {rng.randrange(18)}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, "
            "0x0)",
        )
    for g in gpus:
        sim.kernel(
            a,
            t + 1.5,
            f"NVRM: Xid (PCI:{sim.bus(g)}): 45, pid={sim.pid(sim.ranks_of(a)[g])}, "
            f"name=python, Ch {3:08x}",
        )
    seq = sim.last_seq + 1
    tw = t + sim.sc.pg_timeout
    failed: dict[int, int] = {}
    for node in [a, *sim.sample_peers([a])]:
        for r in list(sim.ranks_of(node))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
            watchdog(sim, r, tw + rng.uniform(0, 4), seq, seq)
            failed[r] = -6
    end = teardown(sim, tw + 6, failed, first_node=a)
    exp = expect(
        sim,
        "fail",
        "hardware",
        [a],
        f"sxid.{o['sxid']}",
        f"NVSwitch {sw} on {a.name} raised fatal SXid {o['sxid']} (also reported by "
        "Fabric Manager), its GPUs logged XID 74 and every collective then hung until "
        "the watchdog fired; no GPU fault came first (CHAINS.md §4).",
    )
    return Result(end, "FAILED", "134:0", exp, needs=[("kernel", a.name)])


def _chain_fabric_manager_down(sim: Sim) -> Result:
    """CHAINS.md §5: Fabric Manager failed at boot -> every CUDA context on A fails with 802."""
    o = Options("fabric_manager_down", sim.sc.fault.options, {"failed_ago": None})
    if not sim.has_fm:
        raise ValueError("fabric_manager_down needs an NVSwitch platform (a100, h100, b200)")
    f = sim.sc.fault
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    ago = (
        o["failed_ago"]
        if o["failed_ago"] is not None
        else rng.choice([240.0, 3600.0 * rng.uniform(2, 60)])
    )
    boot = sim.t0 - float(ago) - 40
    a.boot = boot
    # boot lines without the FM success, then FM's failure
    sim.kernel(
        a,
        boot,
        f"Linux version {sim.kernel_release} (buildd@lcy02-amd64-080) "
        "(x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0) #115-Ubuntu SMP",
    )
    sim.syslog(a, boot + 40, "systemd[1]", "Starting NVIDIA fabric manager service...")
    sim.fm(
        a,
        boot + 41,
        "INFO",
        f"Fabric Manager version {sim.driver} is running with the following configuration options",
    )
    sim.syslog(
        a,
        boot + 44,
        "systemd[1]",
        "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
    )
    sim.syslog(
        a, boot + 44, "systemd[1]", "nvidia-fabricmanager.service: Failed with result 'exit-code'."
    )
    sim.syslog(a, boot + 44, "systemd[1]", "Failed to start NVIDIA fabric manager service.")
    a.reboots.append(boot)
    sim.booted.add(a.name)
    sim.no_fm.add(a.name)
    t = sim.t0 + rng.uniform(15, 40)
    sim.out(
        t - 10,
        f"{sim.bracket_stamp(t - 10)} Starting job {sim.job_id} on {len(sim.nodes)} node(s)",
        err=False,
    )
    for r in sim.ranks_of(a):
        sim.rank_block(
            r,
            t + rng.uniform(0, 2),
            traceback_lines(
                train_frames(
                    sim,
                    (
                        f"/home/{sim.sc.user}/run/train.py",
                        61,
                        "setup",
                        "torch.cuda.set_device(local_rank)",
                    ),
                ),
                "RuntimeError: CUDA error: system not yet initialized",
            ),
        )
    failed = dict.fromkeys(sim.ranks_of(a), 1)
    end = teardown(sim, t + 3, failed, first_node=a)
    exp = expect(
        sim,
        "fail",
        "system_software",
        [a],
        "fm.service_failed",
        f"nvidia-fabricmanager failed to start on {a.name} "
        f"({'before' if ago > 300 else 'just before'} "
        "the job); on an NVSwitch node every CUDA context then fails with error 802 "
        "'system not yet initialized', which is what all ranks of that node hit at "
        "start-up (CHAINS.md §5). Only syslog (systemd's lines) and the job's output say so:"
        " a suspect, not blamed.",
    )
    return Result(end, "FAILED", "1:0", exp, confirmed=set())


def _chain_fabric_manager_restarted(sim: Sim) -> Result:
    """CHAINS.md §5: Fabric Manager restarted without a GPU reset -> NVLS multicast setup fails."""
    f = sim.sc.fault
    Options("fabric_manager_restarted", f.options, {})
    if not sim.has_fm:
        raise ValueError("fabric_manager_restarted needs an NVSwitch platform (a100, h100, b200)")
    a = sim.node_named(f.node)
    sim.quiet.add(a.name)
    rng = sim.rng
    restart = sim.t0 - rng.uniform(1800, 6 * 3600)
    sim.syslog(a, restart, "systemd[1]", "Stopping NVIDIA fabric manager service...")
    sim.syslog(
        a, restart + 2, "systemd[1]", "nvidia-fabricmanager.service: Deactivated successfully."
    )
    sim.syslog(a, restart + 2, "systemd[1]", "Stopped NVIDIA fabric manager service.")
    sim.syslog(a, restart + 3, "systemd[1]", "Starting NVIDIA fabric manager service...")
    sim.syslog(a, restart + 15, "systemd[1]", "Started NVIDIA fabric manager service.")
    ready = job_start(sim)
    t = ready + rng.uniform(0.5, 3)
    handle = rng.getrandbits(62)
    sim.fm(
        a,
        t,
        "ERROR",
        f"failed to find the GPU handle {handle} in the multicast team request setup "
        f"{rng.getrandbits(62)}.",
    )
    size = rng.choice([1073741824, 2147483648, 536870912])
    for r in list(sim.ranks_of(a))[: 2 if len(sim.nodes) > 64 else sim.rpn]:
        sim.nccl(
            r,
            t + 0.2,
            "WARN",
            f"Failed to bind NVLink SHARP (NVLS) Multicast memory of size {size} : CUDA error "
            "800 'operation not permitted'.",
            tid_off=404,
            src="transport/nvls.cc:156",
        )
        sim.rank_block(
            r,
            t + 0.4,
            [
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                "distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled cuda error (run with "
                f"NCCL_DEBUG=INFO for details), NCCL version {sim.nccl_version}",
                "ncclUnhandledCudaError: Call to CUDA function failed.",
                "Last error:",
                f"Failed to bind NVLink SHARP (NVLS) Multicast memory of size {size} : CUDA "
                "error 800 'operation not permitted'.",
            ],
        )
    end = fail_job(sim, t + 1, list(sim.ranks_of(a))[:1], 1, "closed", first_node=a)
    exp = expect(
        sim,
        "fail",
        "system_software",
        [a],
        "fm.multicast_gpu_handle",
        f"nvidia-fabricmanager on {a.name} was restarted hours before the job without a GPU "
        "reset; at the first collective Fabric Manager could not find the GPU handle of the "
        "multicast team and NCCL failed to bind NVLS memory (CUDA 800) on that node's ranks "
        "(CHAINS.md §5, nccl#1488).",
    )
    return Result(end, "FAILED", "1:0", exp)


def _chain_ib_link_flap(sim: Sim) -> Result:
    """CHAINS.md §6: IB/RoCE port error on A -> peers' completion errors naming A's address."""
    o = Options("ib_link_flap", sim.sc.fault.options, {"hca_fatal": False, "origin_logs": True})
    f = sim.sc.fault
    a = sim.node_named(f.node)
    if len(sim.nodes) < 3:
        raise ValueError("ib_link_flap needs at least 3 nodes (peers vote on the address)")
    if not o["origin_logs"]:
        if sim.sc.nccl_debug != "INFO":
            raise ValueError(
                "ib_link_flap with origin_logs false needs nccl_debug INFO: the peer vote maps "
                "addresses to nodes through NCCL's Bootstrap lines"
            )
        sim.forced_missing.add(("kernel", a.name))
    sim.quiet.add(a.name)
    rng = sim.rng
    ready = job_start(sim)
    t = fault_time(sim, ready)
    progress(sim, ready, t)
    hca_bus = sim.pick(HCA_BUSES)
    if o["hca_fatal"]:
        sim.kernel(
            a,
            t - 2,
            f"mlx5_core {hca_bus}: poll_health:800:(pid 0): device's health compromised - reached "
            "miss count",
        )
        sim.kernel(
            a,
            t - 1,
            f"mlx5_core {hca_bus}: mlx5_fw_fatal_reporter_err_work: unrecoverable hardware error",
        )
    sim.kernel(a, t, f"mlx5_core {hca_bus} {a.netdev}: Link down")
    sim.kernel(a, t + rng.uniform(6, 40), f"mlx5_core {hca_bus} {a.netdev}: Link up")
    if o["origin_logs"]:
        for r in list(sim.ranks_of(a))[:2]:
            sim.nccl(
                r,
                t + 0.3,
                "WARN",
                f"NET/IB : {a.hca}:1 Got non-fatal async event: port error(9)",
                tid_off=402,
                src="transport/net_ib.cc:117",
            )
    failed: dict[int, int] = {}
    peers = sim.sample_peers([a])
    voters = peers[: max(2, min(len(peers), 8))]
    for peer in peers:
        for r in list(sim.ranks_of(peer))[:2]:
            tt = t + rng.uniform(8, 20)
            if peer in voters:
                peer_remote_error(sim, r, tt, a, "ib12")
            else:
                peer_remote_error(sim, r, tt, sim.pick(voters), "ib5")
            failed[r] = -6
    if o["origin_logs"]:
        for r in list(sim.ranks_of(a))[:2]:
            peer_remote_error(sim, r, t + rng.uniform(8, 20), voters[0], "ib5")
            failed[r] = -6
    end = teardown(sim, t + 30, failed, first_node=a)
    if o["hca_fatal"]:
        exp = expect(
            sim,
            "fail",
            "hardware",
            [a],
            "mlx5.unrecoverable",
            f"The HCA of {a.name} reported health compromised / unrecoverable hardware "
            "error and its link went down; peers' retry-exceeded completions name its "
            "address (CHAINS.md §6: hardware when the HCA reports fatal).",
            acceptable=["infrastructure"],
        )
    elif o["origin_logs"]:
        exp = expect(
            sim,
            "fail",
            "infrastructure",
            [a],
            "ib.link_flap",
            f"The IB/RoCE link of {a.name} went down and up; the other nodes' NCCL "
            f"completions fail with status 12 (retry exceeded) naming {a.ip}, which NCCL's "
            "Bootstrap lines map to it (CHAINS.md §6). A bad cable or transceiver would "
            "make it hardware, which the logs cannot exclude.",
            acceptable=["hardware"],
        )
    else:
        exp = expect(
            sim,
            "fail",
            "infrastructure",
            [a],
            "ib.peer_vote",
            f"{a.name}'s own logs are missing, but several nodes' NCCL completions fail "
            f"with status 12 naming {a.ip} (= {a.name} by NCCL's Bootstrap lines): the "
            "peer vote of CHAINS.md §0.5 points at its link.",
            acceptable=["hardware"],
        )
    needs = [("kernel", a.name)] if o["origin_logs"] else []
    return Result(end, "FAILED", "134:0", exp, needs=needs)


def _chain_ib_init_config(sim: Sim) -> Result:
    """CHAINS.md §6 discriminator: retry-exceeded (status 12) right at the first collective on
    every node, each naming its own ring neighbours, with no port error anywhere: RoCE GID /
    routing / subnet configuration, not one bad link."""
    f = sim.sc.fault
    Options("ib_init_config", f.options, {})
    if len(sim.nodes) < 3:
        raise ValueError("ib_init_config needs at least 3 nodes")
    rng = sim.rng
    ready = job_start(sim)
    t = ready + rng.uniform(1, 5)
    failed: dict[int, int] = {}
    n = len(sim.nodes)
    for node in sim.sample_peers([]):
        for r in list(sim.ranks_of(node))[:2]:
            ring = sim.nodes[(node.index + 1) % n] if r % 2 == 0 else sim.nodes[node.index - 1]
            peer_remote_error(sim, r, t + rng.uniform(7, 9), ring, "ib12")
            failed[r] = -6
    end = teardown(sim, t + 20, failed, first_node=sim.nodes[0])
    exp = expect(
        sim,
        "fail",
        "system_software",
        [],
        "ib.init_config",
        "Every reporting node's first RDMA transfers failed with status 12 (retry exceeded), "
        "each naming its own ring neighbours, before any training step and with no port error "
        "or link-down anywhere: the fabric cannot route between the nodes (RoCE GID / routing "
        "/ subnet configuration, CHAINS.md §6 discriminator), not one node's link. Fabric "
        "routing is arguably infrastructure.",
        acceptable=["infrastructure"],
    )
    return Result(end, "FAILED", "134:0", exp)


#: the chains of this family, by name
FAMILY: dict[str, ChainFn] = {
    "nvswitch_fatal": _chain_nvswitch_fatal,
    "fabric_manager_down": _chain_fabric_manager_down,
    "fabric_manager_restarted": _chain_fabric_manager_restarted,
    "ib_link_flap": _chain_ib_link_flap,
    "ib_init_config": _chain_ib_init_config,
}
