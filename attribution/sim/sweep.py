"""The sweep: many varied scenarios drawn from one seed (family weights, node counts, platforms,
launchers, clock skew, missing sources and red herrings)."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from attribution import hostlist
from attribution.sim.scenario import (
    FaultSpec,
    NoiseSpec,
    OutOfWindowSpec,
    Platform,
    Scenario,
    SkewSpec,
)

# relative weights of the families in a sweep (clear causes dominate, as in production)
_SWEEP_WEIGHTS: dict[str, float] = {
    "gpu_fell_off_bus": 6,
    "gpu_memory_error": 5,
    "nvlink5_fault": 4,
    "nvswitch_fatal": 3,
    "fabric_manager_down": 3,
    "fabric_manager_restarted": 2,
    "ib_link_flap": 5,
    "ib_init_config": 2,
    "gpu_oom": 6,
    "cgroup_oom": 4,
    "node_oom": 2,
    "collective_straggler": 4,
    "collective_hang": 2,
    "rank_exception": 8,
    "rank_segfault": 3,
    "illegal_address": 3,
    "node_failure": 5,
    "preemption": 3,
    "time_limit": 4,
    "time_limit_hang": 2,
    "user_cancel": 3,
    "lustre_eviction": 3,
    "nfs_hang": 3,
    "gsp_timeout": 3,
    "nccl_shm": 3,
    "exit_unexplained": 2,
    "peer_lost_no_evidence": 2,
    "killed_unexplained": 1,
}


_OPTION_CHOICES: dict[str, list[dict[str, Any]]] = {
    "gpu_fell_off_bus": [{}, {"aer": False}, {"hang": True}],
    "gpu_memory_error": [
        {},
        {"containment": "uncontained", "remap": "failed"},
        {"containment": "uncontained", "remap": "none"},
        {"remap": "failed"},
    ],
    "nvlink5_fault": [{"code": 149}, {"code": 149}, {"code": 145}],
    "nvswitch_fatal": [{"sxid": 24007}, {"sxid": 12022}, {"sxid": 20034}],
    "ib_link_flap": [{}, {}, {"hca_fatal": True}, {"origin_logs": False}],
    "rank_exception": [{}, {}, {}, {"exception": "ModuleNotFoundError"}],
    "rank_segfault": [{}, {}, {"library": "libnccl"}],
    "node_failure": [
        {},
        {"evidence": "slurmctld"},
        {"evidence": "failed_node"},
        {"precursor": "mce"},
        {"precursor": "xid79"},
        {"precursor": "panic"},
    ],
    "user_cancel": [{}, {}, {"by": "admin"}],
    "gpu_oom": [{}, {}, {}, {"leftover_process": True}],
    "lustre_eviction": [{}, {}, {"nodes": 3}],
}


_SWEEP_PLATFORMS: list[Platform] = ["a100", "h100", "h100", "b200"]

_BLACKWELL: list[Platform] = ["b200", "gb200"]

_ZONES = ["UTC", "UTC", "UTC", "Europe/Berlin", "America/Chicago", "Asia/Tokyo"]


def _sweep_nodes(rng: random.Random, count: int) -> str:
    prefix = rng.choice(["gpu", "node", "dgx", "hgx-a", "nid"])
    width = rng.choice([3, 4]) if count < 1000 else 4
    pool = count + (rng.randrange(0, count // 2 + 1) if rng.random() < 0.3 else 0)
    base = rng.randrange(0, 200)
    nums = sorted(rng.sample(range(base, base + pool), count))
    return hostlist.compress(f"{prefix}{n:0{width}d}" for n in nums)


def sweep(n: int, seed: int) -> list[Scenario]:
    """``n`` varied scenarios drawn from ``seed`` (deterministic).

    Families are drawn by weight; node counts log-uniformly from 2 to 1,024;
    skew up to 20 s (sometimes 45 s); some nodes lose a source (never the
    root node's evidence, except in the families that are about missing
    evidence); red herrings (benign XID 63/92, boot flaps, errors from the day
    before) are mixed in.
    """
    rng = random.Random(seed)
    chains = list(_SWEEP_WEIGHTS)
    weights = [_SWEEP_WEIGHTS[c] for c in chains]
    out: list[Scenario] = []
    for i in range(n):
        chain = rng.choices(chains, weights)[0]
        # mostly small jobs (2-128 nodes, log-skewed), as on a real cluster; every 40th job
        # is a big one (256-1,024 nodes)
        if i % 40 == 12:
            count = rng.choice([256, 384, 512, 768, 1024])
        else:
            count = max(2, min(128, round(2 ** (1 + 6 * rng.random() ** 2))))
        if chain in ("ib_link_flap", "ib_init_config", "peer_lost_no_evidence"):
            count = max(count, 3)
        platform: Platform = rng.choice(_SWEEP_PLATFORMS)
        if chain == "nvlink5_fault":
            platform = rng.choice(_BLACKWELL)
        if chain in (
            "nvswitch_fatal",
            "fabric_manager_down",
            "fabric_manager_restarted",
        ) and platform not in (
            "a100",
            "h100",
            "b200",
        ):
            platform = "h100"
        nodes = _sweep_nodes(rng, count)
        names = hostlist.expand(nodes)
        options = dict(rng.choice(_OPTION_CHOICES.get(chain, [{}])))
        root = rng.choice(names)
        missing: dict[str, list[str]] = {}
        if rng.random() < 0.3 and len(names) > 2:
            victim = rng.choice([x for x in names if x != root])
            streams = ["syslog", "fabricmanager"] if options.get("nodes") else ["kernel", "syslog"]
            missing[rng.choice([*streams, "fabricmanager"])] = [victim]
        if chain == "peer_lost_no_evidence":
            missing["kernel"] = [*missing.get("kernel", []), root]
        if rng.random() < 0.1:
            missing["fabricmanager"] = ["*"]
        oow = []
        if rng.random() < 0.35:
            oow.append(
                OutOfWindowSpec(
                    signal=rng.choice(["xid79", "xid48", "nfs", "oom", "link_down", "sxid"]),
                    before_start=rng.choice([86400.0, 2 * 86400.0, 7200.0]),
                )
            )
        if rng.random() < 0.1:
            oow.append(OutOfWindowSpec(signal=rng.choice(["xid79", "oom"]), after_end=3600.0))
        month = rng.randrange(1, 13)
        start = datetime(
            2025,
            month,
            rng.randrange(1, 28),
            rng.randrange(0, 24),
            rng.randrange(60),
            rng.randrange(60),
            tzinfo=UTC,
        )
        skew_max = rng.choice([0.0, 2.0, 5.0, 10.0, 20.0]) if rng.random() < 0.9 else 45.0
        scenario = Scenario(
            name=f"sweep{seed}-{i:04d}-{chain.replace('_', '-')}",
            seed=rng.randrange(2**31),
            nodes=nodes,
            platform=platform,
            launcher=rng.choice(["torchrun", "torchrun", "srun"]),
            srun_label=rng.random() < 0.7,
            torch_style="new" if rng.random() < 0.8 else "old",
            split_output=rng.random() < 0.4,
            nccl_debug=(
                "WARN"
                if rng.random() < 0.25
                and not (chain == "ib_link_flap" and not options.get("origin_logs", True))
                else "INFO"
            ),
            start=start,
            timezone=rng.choice(_ZONES),
            time_limit=rng.choice([2, 4, 8, 24]) * 3600,
            pg_timeout=rng.choice([600, 600, 1800]),
            fault=FaultSpec(chain=chain, node=root, options=options),  # type: ignore[arg-type]
            noise=NoiseSpec(
                level=rng.choice(["low", "normal", "normal", "high"]) if count <= 64 else "low",
                benign_xid_nodes=1 if rng.random() < 0.25 else 0,
                boot_flap_nodes=1 if rng.random() < 0.2 else 0,
            ),
            skew=SkewSpec(max_seconds=skew_max),
            missing=missing,  # type: ignore[arg-type]
            out_of_window=oow,
            compress=0.1 if rng.random() < 0.3 else 0.0,
        )
        out.append(scenario)
    return out
