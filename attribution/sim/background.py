"""What the nodes log whatever the fault: boot lines, everyday kernel and syslog chatter,
red herrings (informational XIDs, link flaps of a fresh boot) and real-looking errors that
fall outside the job's window.
"""

from __future__ import annotations

from attribution.sim.scenario import OutOfWindowSpec
from attribution.sim.state import HCA_BUSES, NVSWITCH_BUSES, Node, Sim

_KERNEL_CHATTER = [
    "perf: interrupt took too long (2503 > 2500), lowering kernel.perf_event_max_sample_rate to "
    "79750",
    "EXT4-fs (nvme0n1p2): re-mounted. Quota mode: none.",
    "systemd-journald[812]: Data hash table of /var/log/journal/system.journal has a fill level "
    "at 75.0 (3827 of 5101 items), suggesting rotation.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): {netdev}: link becomes ready",
    'audit: type=1400 audit({epoch}.{ms:03d}:{n}): apparmor="STATUS" '
    'operation="profile_replace" info="same as current profile, skipping" '
    'profile="unconfined" name="nvidia_modprobe" pid={pid}',
    "mlx5_core {hca_bus}: mlx5_cmd_out_err:838:(pid {pid}): ACCESS_REG(0x805) op_mod(0x1) failed, "
    "status bad resource(0x5), syndrome (0x305684), err(-22)",
    "nvidia-nvswitch{sw}: open (major=508)",
    "TCP: request_sock_TCP: Possible SYN flooding on port 6817. Sending cookies.  Check SNMP "
    "counters.",
    "NFSD: Using nfsdcld client tracking operations.",
    "bond0: (slave eno1): link status definitely up, 25000 Mbps full duplex",
]


_SYSLOG_CHATTER = [
    ("systemd[1]", "Started Session {n} of User {user}."),
    ("systemd-logind[1422]", "New session {n} of user {user}."),
    ("chronyd[1311]", "Selected source 10.0.0.1 (ntp1.cluster.local)"),
    ("systemd[1]", "Starting Cleanup of Temporary Directories..."),
    ("nvidia-persistenced[2201]", "device 0000:18:00.0 - persistence mode enabled."),
    (
        "slurmstepd[{spid2}]",
        "task/cgroup: _memcg_initialize: job: alloc=1048576MB mem.limit=1048576MB",
    ),
    ("kernel", "IPv4: martian source 10.255.255.255 from 10.0.0.4, on dev eno1"),
]


def add_noise(sim: Sim, end_hint: float) -> None:
    sc = sim.sc
    rng = sim.rng
    per_node = {"none": 0, "low": 1, "normal": 3, "high": 12}[sc.noise.level]
    span0 = sim.t0 - 1800
    for node in sim.nodes:
        # the boot of this node, if it falls in the logged span, and FM start
        if node.name not in sim.booted:
            boot_lines(sim, node, node.boot, flaps=False)
        for _ in range(rng.randint(0, per_node) if per_node else 0):
            t = rng.uniform(span0, end_hint)
            msg = sim.pick(_KERNEL_CHATTER).format(
                netdev=node.netdev,
                epoch=int(t),
                ms=rng.randrange(1000),
                n=rng.randrange(100, 999),
                pid=rng.randrange(1000, 90000),
                hca_bus=sim.pick(HCA_BUSES),
                sw=rng.randrange(0, 4),
            )
            if "nvswitch" in msg and not sim.has_fm:
                continue
            sim.kernel(node, t, msg)
        sim.syslog(
            node,
            sim.t0 + rng.uniform(0.2, 1.5),
            f"slurmd[{node.pid_base % 30000 + 1000}]",
            f"launch task StepId={sim.job_id}.0 request from UID:{sc.uid} GID:{sc.uid} "
            f"HOST:{sim.nodes[0].ip} PORT:{rng.randrange(30000, 60000)}",
        )
        for _ in range(rng.randint(0, 1 + per_node)):
            ident, msg = sim.pick(_SYSLOG_CHATTER)
            t = rng.uniform(span0, end_hint)
            sim.syslog(
                node,
                t,
                ident.format(spid=node.pid_base % 30000 + 1000, spid2=node.pid_base % 40000 + 900),
                msg.format(
                    n=rng.randrange(10, 9999),
                    user=sc.user,
                    job=sim.job_id,
                    uid=sc.uid,
                    ip=sim.nodes[0].ip,
                    port=rng.randrange(30000, 60000),
                ),
            )
        if sim.has_fm and node.name not in sim.no_fm and rng.random() < 0.3:
            sim.fm(
                node,
                rng.uniform(span0, end_hint),
                "INFO",
                "Received an inband message:  Message header details: version 1 type 3",
            )
    # red herrings: informational XIDs, boot flaps
    chosen = [n for n in sim.nodes if n.name not in sim.quiet]
    for node in rng.sample(chosen, min(sc.noise.benign_xid_nodes, len(chosen))):
        gpu = rng.randrange(sim.gpus)
        t = rng.uniform(sim.t0 + 60, max(sim.t0 + 120, end_hint - 120))
        if rng.random() < 0.6:
            sim.kernel(
                node,
                t,
                f"NVRM: Xid (PCI:{sim.bus(gpu)}): 63, pid='<unknown>', name=<unknown>, "
                "Row Remapper: New row marked for remapping, reset gpu to activate.",
            )
        else:
            sim.kernel(
                node,
                t,
                f"NVRM: Xid (PCI:{sim.bus(gpu)}): 92, pid=0, name=<unknown>, "
                "High single-bit ECC error rate",
            )
    for node in rng.sample(chosen, min(sc.noise.boot_flap_nodes, len(chosen))):
        boot = sim.t0 - rng.uniform(60, 240)
        node.boot = boot
        boot_lines(sim, node, boot, flaps=True)


def boot_lines(sim: Sim, node: Node, boot: float, *, flaps: bool, always: bool = False) -> None:
    if boot < sim.t0 - 1800 and not flaps and not always:
        return  # boot is long before the logged span
    rng = sim.rng
    node.reboots.append(boot)
    sim.booted.add(node.name)
    sim.kernel(
        node,
        boot,
        f"Linux version {sim.kernel_release} (buildd@lcy02-amd64-080) "
        "(x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0) #115-Ubuntu SMP",
    )
    sim.kernel(node, boot + 0.01, "Command line: BOOT_IMAGE=/vmlinuz root=/dev/md0 ro quiet")
    sim.kernel(
        node,
        boot + 19.2,
        f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {sim.driver}  "
        "Release Build  (dvs-builder@U16-I3-B03-4-3)",
    )
    for gpu in range(sim.gpus):
        uuid = (
            f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-"
            f"{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
        )
        sim.kernel(node, boot + 21.0 + gpu * 0.05, f"NVRM: GPU at PCI:{sim.bus(gpu)}: {uuid}")
    if flaps:
        hca_bus = sim.pick(HCA_BUSES)
        sim.kernel(node, boot + 24.3, f"mlx5_core {hca_bus} {node.netdev}: Link down")
        sim.kernel(node, boot + 31.8, f"mlx5_core {hca_bus} {node.netdev}: Link up")
        sim.kernel(
            node, boot + 32.1, f"IPv6: ADDRCONF(NETDEV_CHANGE): {node.netdev}: link becomes ready"
        )
    if sim.has_fm:
        sim.syslog(node, boot + 40, "systemd[1]", "Starting NVIDIA fabric manager service...")
        sim.fm(
            node,
            boot + 41,
            "INFO",
            f"Fabric Manager version {sim.driver} is running with the "
            "following configuration options",
        )
        sim.syslog(
            node,
            boot + 52,
            f"nv-fabricmanager[{node.pid_base % 5000 + 1100}]",
            "Successfully configured all the available NVSwitches to route GPU NVLink traffic. "
            "NVLink Peer-to-Peer support will be enabled once the GPUs are successfully "
            "registered with the NVLink fabric.",
        )
        sim.syslog(node, boot + 52.5, "systemd[1]", "Started NVIDIA fabric manager service.")


def add_out_of_window(sim: Sim, spec: OutOfWindowSpec, end: float, avoid: set[str]) -> None:
    node = sim.node_named(spec.node, avoid=avoid)
    rng = sim.rng
    if spec.after_end is not None:
        t = end + spec.after_end
    else:
        t = sim.t0 - (spec.before_start if spec.before_start is not None else 86400.0)
    if node.boot > t - 60:  # the node must have been up then
        node.boot = t - rng.uniform(3600, 86400)
    gpu = rng.randrange(sim.gpus)
    bus = sim.bus(gpu)
    if spec.signal in ("xid79", "xid48") and spec.after_end is None:
        # a GPU that fell off the bus or lost memory stays broken until the node is reset: a node
        # that ran the job after it was rebooted (or the fault would be the job's problem too)
        gap = sim.t0 - t
        boot_lines(sim, node, t + rng.uniform(0.2, 0.8) * gap, flaps=False, always=True)
    if spec.signal == "xid79":
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the "
            "bus.",
        )
        sim.kernel(node, t, f"NVRM: GPU {bus}.0: GPU has fallen off the bus.")
    elif spec.signal == "xid48":
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 48, pid='<unknown>', name=<unknown>, An uncorrectable "
            "double bit error (DBE) has been detected on GPU in the framebuffer at physAddr "
            "0x1f2e3d4c5 partition 3, subpartition 1.",
        )
        sim.kernel(
            node,
            t,
            f"NVRM: Xid (PCI:{bus}): 95, pid=4411, name=python, Uncontained: FBHUB. RST: Yes, "
            "D-RST: No",
        )
    elif spec.signal == "nfs":
        sim.kernel(node, t, "nfs: server nfs01 not responding, still trying")
        sim.kernel(node, t + 95, "nfs: server nfs01 OK")
    elif spec.signal == "oom":
        sim.kernel(
            node,
            t,
            "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0",
        )
        sim.kernel(
            node,
            t,
            "Out of memory: Killed process 88121 (python) total-vm:302331996kB, "
            "anon-rss:291345112kB, file-rss:90112kB, shmem-rss:0kB, UID:1002 pgtables:571234kB "
            "oom_score_adj:0",
        )
    elif spec.signal == "link_down":
        hca_bus = sim.pick(HCA_BUSES)
        sim.kernel(node, t, f"mlx5_core {hca_bus} {node.netdev}: Link down")
        sim.kernel(node, t + 12, f"mlx5_core {hca_bus} {node.netdev}: Link up")
    elif spec.signal == "sxid":
        sim.kernel(
            node,
            t,
            f"nvidia-nvswitch1: SXid (PCI:{NVSWITCH_BUSES[1]}): 12022, Fatal, Link 33 egress "
            "input ECC DBE error",
        )
