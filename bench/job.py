#!/usr/bin/env python3
"""Benchmark big diagnoses: a many-node job, its output and a month of kernel log per node.

Usage:
  uv run python bench/job.py                      # 1,024 nodes, 8 MiB node logs, 2 GiB output
  uv run python bench/job.py --nodes 1000,2000,4000,8000,16000
                                                  # per-node cost sweep, tiny logs
  uv run python bench/job.py --preset 100k-gpu [--delete]
                                                  # 12,500 nodes x 8 GPUs, 10 GiB output
Options: [--job-output-mb N] [--node-log-kb N] [--job-hours H] [--gpus-per-node G]
         [--repeat R] [--delete] [--dir /tmp/attribution-bench/job]

Each bundle is written once under ``--dir`` and kept between runs (``--delete`` removes it
after the run). It has ``job/stdout.log`` of the given size: with GPUs, first every rank's
NCCL "Init COMPLETE"; then steady-state chatter from every node and rank (NCCL INFO, data
loading) written from a few template blocks with a block counter, rank 0's training step about
once a second of the job; at the end the NCCL errors that follow a lost GPU. For every node a
``kern.log`` spanning 30 days (syslog format) with the job's hours in the middle; one node
logs an XID 79 in the middle of the job; a fat-tree ``topology.conf``. Then, in a fresh
process, it diagnoses the bundle the way ``sattr diagnose`` does.

One node count prints: wall time, CPU time, a timeline (bundle listed, job output read,
node logs read, verdict), bytes read (``/proc/self/io`` ``rchar``) against bytes on disk, the
node-log bytes inside the job window, peak RSS and the verdict (it must be hardware,
gpu-fell-off-bus, the node with the XID).

Several node counts (a sweep) print, per count, the diagnosis's CPU and wall time per node,
and the ratio of the largest count's per-node cost to the smallest's (the baseline, from the
same run): linear in nodes means a ratio near 1.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DAYS = 30
LOG_START = datetime(2026, 5, 1, tzinfo=UTC)
JOB_START = datetime(2026, 5, 20, 8, 0, tzinfo=UTC)
CHATTER = [
    'kernel: [{up:>12.6f}] audit: type=1400 audit({up:.3f}:{i}): apparmor="STATUSONLY" profile="snap.lxd"',
    "kernel: [{up:>12.6f}] mlx5_core 0000:5c:00.0: mlx5e_tx_timeout_eq_recover: EQ 0x{i:x}: Cons = 0x{i:x}, irqn = 0x2b",
    "systemd[1]: Started Session {i} of User slurm.",
    "kernel: [{up:>12.6f}] nvidia-uvm: Unregistered the UVM driver.",
    "slurmd[2301]: launch task StepId={i}.0 request from UID:1001 GID:1001 HOST:10.0.0.1 PORT:51234",
]
PRESETS = {
    # a 100,000-GPU job: 12,500 nodes of 8 GPUs, 1.5 MiB of kernel log per node over 30 days
    # (bisected to the job's window: above reading.seek_threshold), 10 GiB of job output
    "100k-gpu": {
        "nodes": "12500",
        "gpus_per_node": 8,
        "job_output_mb": 10240,
        "node_log_kb": 1536,
        "job_hours": 6.0,
    },
}
SWEEP = {"job_output_mb": 1, "node_log_kb": 2}  # tiny logs: the cost of a node, not of bytes
SINGLE = {"job_output_mb": 2048, "node_log_kb": 8192}
BEFORE_SWEEP = (
    "commit 97f3f9a, same bundles and machine: CPU 0.75 -> 0.94 ms/node (1.26x), per added node "
    "0.56 -> 1.18 ms (2.09x); under heavier load 0.81 -> 1.51 ms/node (1.86x); issue 17 (other "
    "logs): 0.28 -> 0.91 ms/node (3.25x)"
)


def name_width(count: int) -> int:
    return max(4, len(str(count)))


def node_name(i: int, width: int) -> str:
    return f"node{i:0{width}d}"


# ---------------------------------------------------------------------------- writing


def node_template(size: int, job_end: datetime, xid_at: datetime) -> tuple[bytes, bytes, int]:
    """One node's month of kernel/syslog lines (``HOSTNAME`` placeholder), cut where the XID
    goes, and the bytes that lie inside the job window (per node, hostname of 8 characters)."""
    sample = len(CHATTER[0]) + 40
    lines = max(5, size // sample)
    step = DAYS * 86400 / lines
    head: list[str] = []
    tail: list[str] = []
    inside = 0
    lo, hi = JOB_START - timedelta(seconds=300), job_end + timedelta(seconds=300)
    for i in range(lines):
        t = LOG_START + timedelta(seconds=i * step)
        text = CHATTER[i % len(CHATTER)].format(up=i * step, i=i)
        line = f"{t.strftime('%b %d %H:%M:%S')} HOSTNAME {text}"
        if lo <= t <= hi:
            inside += len(line) + 1 - len("HOSTNAME") + 8
        (head if t < xid_at else tail).append(line)
    return (
        "".join(x + "\n" for x in head).encode(),
        "".join(x + "\n" for x in tail).encode(),
        inside,
    )


def write_node_log(path: Path, node: bytes, head: bytes, tail: bytes, xid: bytes | None) -> None:
    with path.open("wb", buffering=0) as fh:
        fh.write(head.replace(b"HOSTNAME", node))
        if xid is not None:
            fh.write(xid)
        fh.write(tail.replace(b"HOSTNAME", node))


BLOCK_LINES = 20000


def job_output_blocks(nodes: list[str], gpus: int, progress: int) -> list[bytes]:
    """Blocks of steady-state chatter from every node and rank (NCCL INFO, data loading), with
    ``progress`` training-step lines of rank 0 in each; ``YYYY-MM-DD HH:MM`` and ``BLOCKNR``
    are filled in per block, so no two blocks are the same."""
    per = max(gpus, 1)
    ranks = len(nodes) * per
    every = max(1, BLOCK_LINES // max(progress, 1))
    blocks = []
    for b in range(4):
        out = []
        for i in range(BLOCK_LINES):
            j = b * BLOCK_LINES + i
            n = nodes[j % len(nodes)]
            d = (j // len(nodes)) % per
            r = (j % len(nodes)) * per + d
            pid = f"{n}:{1000 + d}:{2000 + d} [{d}] NCCL INFO"
            s = i % 60
            if progress and i % every == 0 and i // every < progress:
                out.append(
                    f"[YYYY-MM-DD HH:MM:{s:02d},118] [INFO] [rank0] step BLOCKNR{i // every:03d} "
                    f"loss {2.5 - i * 1e-5:.5f} lr 3.0e-04 grad_norm 1.02 tokens/s 812331"
                )
            elif i % 4 == 0:
                out.append(
                    f"{pid} Channel {i % 32:02d}/0 : {r} [{d}] -> {(r + per) % ranks} [{d}] "
                    f"[send] via NET/IB/{d}/GDRDMA"
                )
            elif i % 4 == 1:
                out.append(
                    f"{pid} AllReduce: opCount BLOCKNR{i:05x} sendbuff 0x7f1200000000 recvbuff "
                    f"0x7f1200000000 count 262144 datatype 7 op 0 root 0 comm 0x55d3a0 "
                    f"[nranks={ranks}] stream 0x55e1b0"
                )
            elif i % 4 == 2:
                out.append(
                    f"[YYYY-MM-DD HH:MM:{s:02d},118] [rank{r}] dataloader worker {i % 8} "
                    f"prefetched batch BLOCKNR{i:05d} in {i % 97 / 7:.1f} ms"
                )
            else:
                out.append(f"{pid} Channel {i % 32:02d}/32 : {d} {(d + 1) % per} via P2P/IPC/read")
        blocks.append("".join(x + "\n" for x in out).encode())
    return blocks


def write_job_output(
    path: Path, size: int, nodes: list[str], bad: str, gpus: int, job_end: datetime
) -> None:
    span = (job_end - JOB_START).total_seconds()
    per = max(gpus, 1)
    with path.open("wb") as fh:
        if gpus:  # NCCL_DEBUG=INFO: every rank says its communicator is up
            init = []
            for k, n in enumerate(nodes):
                for d in range(gpus):
                    init.append(
                        f"{n}:{1000 + d}:{2000 + d} [{d}] NCCL INFO comm 0x55d3a0 rank "
                        f"{k * gpus + d} nranks {len(nodes) * gpus} cudaDev {d} nvmlDev {d} "
                        f"busId {0x18 + 0x10 * d:x}000 commId 0x7d3c1b2a9e - Init COMPLETE\n"
                    )
                if len(init) >= 50000:
                    fh.write("".join(init).encode())
                    init = []
            fh.write("".join(init).encode())
        # rank 0 logs a training step about once a second of the job
        estimate = max(1, size // (BLOCK_LINES * 110))
        blocks = job_output_blocks(nodes, gpus, min(1000, max(1, round(span / estimate))))
        total = max(1, (size - fh.tell()) // len(blocks[0]))
        for k in range(total):
            when = JOB_START + timedelta(seconds=span * k / total)
            data = blocks[k % len(blocks)].replace(b"BLOCKNR", b"%07d" % k)
            fh.write(data.replace(b"YYYY-MM-DD HH:MM", when.strftime("%Y-%m-%d %H:%M").encode()))
        tail = []
        for r, n in enumerate(nodes[:64]):
            if n == bad:
                continue
            tail.append(
                f"{n}:{3000 + r}:{3100 + r} [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer {bad}<{40000 + r}>"
            )
            tail.append(
                f"[rank{r * per}]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."
            )
        fh.write(("\n".join(tail) + "\n").encode())


def generate(root: Path, args: argparse.Namespace, count: int) -> dict[str, object]:
    width = name_width(count)
    nodes = [node_name(i, width) for i in range(1, count + 1)]
    bad = nodes[len(nodes) // 2]
    job_end = JOB_START + timedelta(hours=args.job_hours)
    xid_at = JOB_START + timedelta(hours=args.job_hours / 2)
    (root / "job").mkdir(parents=True, exist_ok=True)
    head, tail, inside = node_template(args.node_log_kb << 10, job_end, xid_at)
    xid = f"{xid_at.strftime('%b %d %H:%M:%S')} {bad} kernel: [1641600.000000] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n".encode()
    for n in nodes:
        d = root / "nodes" / n
        d.mkdir(parents=True, exist_ok=True)
        write_node_log(d / "kern.log", n.encode(), head, tail, xid if n == bad else None)
    write_job_output(
        root / "job" / "stdout.log",
        args.job_output_mb << 20,
        nodes,
        bad,
        args.gpus_per_node,
        job_end,
    )
    hostlist = f"node[{1:0{width}d}-{count:0{width}d}]"
    job: dict[str, object] = {
        "cluster": "bench",
        "job_id": "777",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": hostlist,
        "start": JOB_START.isoformat(),
        "end": job_end.isoformat(),
        "user": "bench",
    }
    if args.gpus_per_node:
        job["exclusive"] = True
        g = args.gpus_per_node
        job["gres_detail"] = {hostlist: f"gpu:h100:{g}(IDX:0-{g - 1})"}
    (root / "job.json").write_text(json.dumps(job))
    meta: dict[str, object] = {"window_bytes": inside * count, "bad": bad}
    (root / "bench-meta.json").write_text(json.dumps(meta))  # last: the bundle is complete
    return meta


def write_topology(root: Path, count: int) -> None:
    """``topology.conf`` of a fat tree: leaf switches of 32 nodes, spines of 16 leaves, a core
    (what ``sattr bundle`` copies from the site; the verdict says where its nodes are)."""
    width = name_width(count)
    lines, leaves = [], []
    for first in range(1, count + 1, 32):
        leaves.append(f"leaf{len(leaves):04d}")
        last = min(count, first + 31)
        lines.append(f"SwitchName={leaves[-1]} Nodes=node[{first:0{width}d}-{last:0{width}d}]")
    spines = []
    for first in range(0, len(leaves), 16):
        spines.append(f"spine{len(spines):03d}")
        last = min(len(leaves) - 1, first + 15)
        lines.append(f"SwitchName={spines[-1]} Switches=leaf[{first:04d}-{last:04d}]")
    lines.append(f"SwitchName=core Switches=spine[000-{len(spines) - 1:03d}]")
    (root / "topology.conf").write_text("\n".join(lines) + "\n")


def bundle_dir(args: argparse.Namespace, count: int) -> Path:
    return Path(args.dir) / (
        f"n{count}-g{args.gpus_per_node}-j{args.job_output_mb}-l{args.node_log_kb}k"
        f"-h{args.job_hours:g}"
    )


def ensure(args: argparse.Namespace, count: int) -> Path:
    root = bundle_dir(args, count)
    if not (root / "bench-meta.json").exists():
        print(f"writing the bundle under {root} ...", flush=True)
        t = time.perf_counter()
        generate(root, args, count)
        print(f"  written in {time.perf_counter() - t:.0f} s", flush=True)
    if not (root / "topology.conf").exists():
        write_topology(root, count)
    return root


def disk(path: Path) -> tuple[int, int]:
    """Bytes of the regular files under ``path``: apparent size and allocated on disk."""
    size = used = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            st = os.stat(os.path.join(dirpath, f))
            size += st.st_size
            used += st.st_blocks * 512
    return size, used


# ---------------------------------------------------------------------------- measuring


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(root: Path) -> None:
    """Diagnose in this (fresh) process and print one JSON line of measurements."""
    import attribution.bundle as bundle_mod
    from attribution.model import Stream
    from attribution.rules.loader import load_ruleset
    from attribution.scan import read_context
    from attribution.sources import textlog

    rules = load_ruleset()
    # the scanners are compiled once per ruleset and process (a worker has them): not per job
    read_context(bundle_mod.read_job(root / "job.json"), rules)
    marks: dict[str, float] = {}
    spent = {"job": 0.0, "node": 0.0, "other": 0.0}
    original_lines = textlog.SourceReader.lines
    original_load = bundle_mod.load_bundle

    def timed_lines(self: textlog.SourceReader):
        # CPU of the thread that reads this source (a read-ahead thread runs one source to its
        # end), and when the last source of each kind was done
        if self.spec.stream in (Stream.JOB_STDOUT, Stream.JOB_STDERR):
            kind = "job"
        else:
            kind = "node" if self.spec.node else "other"
        t = time.thread_time()
        try:
            yield from original_lines(self)
        finally:
            spent[kind] += time.thread_time() - t
            marks[kind] = time.perf_counter()

    def timed_load(path):
        found = original_load(path)
        marks["load"] = time.perf_counter()
        return found

    textlog.SourceReader.lines = timed_lines
    bundle_mod.load_bundle = timed_load
    before = rchar()
    c0, main0 = cpu(), time.thread_time()
    t0 = time.perf_counter()
    _, verdict = bundle_mod.diagnose_bundle(root, rules)
    wall = time.perf_counter() - t0
    total_cpu = cpu() - c0
    main_cpu = time.thread_time() - main0
    read = rchar() - before
    node_read = sum(c.bytes for c in verdict.coverage if c.node)
    job_read = sum(c.bytes for c in verdict.coverage if not c.node)
    print(
        json.dumps(
            {
                "wall": wall,
                "cpu": total_cpu,
                "main_cpu": main_cpu,
                "spent": spent,
                "marks": {k: v - t0 for k, v in marks.items()},
                "rchar": read,
                "node_read": node_read,
                "job_read": job_read,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "sub_domain": verdict.sub_domain.value,
                "nodes": [r.node for r in verdict.responsible],
                "cause": verdict.cause.id if verdict.cause else None,
                "where": verdict.placement.label if verdict.placement else None,
            }
        )
    )


def measure(root: Path, warm: bool) -> dict[str, Any]:
    if warm:  # the job output in the page cache, as a worker would meet it
        subprocess.run(["sh", "-c", f"cat {root}/job/* > /dev/null"], check=False)
    out = subprocess.run(
        [sys.executable, __file__, "--run", str(root)], capture_output=True, text=True, check=False
    )
    if out.returncode:
        sys.exit(f"the diagnosis failed:\n{out.stderr}")
    m: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return m


def correct(m: dict[str, Any], root: Path) -> bool:
    meta = json.loads((root / "bench-meta.json").read_text())
    return (
        m["sub_domain"] == "hardware"
        and m["cause"] == "gpu-fell-off-bus"
        and m["nodes"] == [meta["bad"]]
    )


def single(args: argparse.Namespace, count: int) -> None:
    root = ensure(args, count)
    meta = json.loads((root / "bench-meta.json").read_text())
    node_disk, node_used = disk(root / "nodes")
    job_disk, job_used = disk(root / "job")
    runs = [measure(root, warm=True) for _ in range(args.repeat)]
    m = min(runs, key=lambda r: float(r["wall"]))
    gb = 1e9
    print(
        f"job: {count:,} nodes x {args.gpus_per_node} GPUs, {args.job_hours:g} h; evidence on disk "
        f"{(node_disk + job_disk) / gb:.2f} GB, {(node_used + job_used) / gb:.2f} GB allocated "
        f"(node logs {node_disk / gb:.2f} GB over {DAYS} days, {node_disk / count / 1e6:.2f} MB "
        f"a node; job output {job_disk / gb:.2f} GB)"
    )
    walls = ", ".join(f"{float(r['wall']):.1f}" for r in runs)
    print(
        f"wall time            {m['wall']:.1f} s (CPU {m['cpu']:.1f} s)"
        + (f"; best of {len(runs)} runs: {walls} s" if len(runs) > 1 else "")
    )
    marks = m["marks"]
    spent = m["spent"]
    print(
        f"timeline             bundle listed {marks.get('load', 0):.1f} s, job output read "
        f"{marks.get('job', 0):.1f} s, node logs read {marks.get('node', 0):.1f} s, verdict "
        f"{m['wall']:.1f} s"
    )
    print(
        f"CPU split            job output {spent['job']:.1f} s, node logs {spent['node']:.1f} s, "
        f"other sources {spent['other']:.1f} s (reader threads); main thread (listing, "
        f"analysis, verdict) {m['main_cpu']:.1f} s"
    )
    print(
        f"read (rchar)         {m['rchar'] / gb:.2f} GB of {(node_disk + job_disk) / gb:.2f} GB on disk"
    )
    print(
        f"node logs read       {m['node_read'] / 1e6:.1f} MB; inside the job window "
        f"{meta['window_bytes'] / 1e6:.1f} MB -> "
        f"{m['node_read'] / max(1, meta['window_bytes']):.2f}x the window"
    )
    print(f"job output read      {m['job_read'] / gb:.2f} GB of {job_disk / gb:.2f} GB")
    print(f"peak RSS             {m['rss_mb']:.0f} MiB")
    print(
        f"verdict              {m['sub_domain']} {m['cause']} {m['nodes']} "
        f"({'correct' if correct(m, root) else 'WRONG'}), under {m['where']}"
    )
    if args.delete:
        shutil.rmtree(root)
        print(f"deleted {root}")


def sweep(args: argparse.Namespace, counts: list[int]) -> None:
    rows = []
    for count in counts:
        root = ensure(args, count)
        runs = [measure(root, warm=True) for _ in range(args.repeat)]
        best = min(runs, key=lambda m: float(m["cpu"]))
        rows.append((count, best, correct(best, root)))
        if args.delete:
            shutil.rmtree(root)
    print(
        f"per-node cost: {args.node_log_kb} KiB kernel log a node, {args.job_output_mb} MiB job "
        f"output; diagnosis only (rules loaded, scanners compiled before), best CPU of {args.repeat}"
    )
    print(
        f"{'nodes':>7} {'wall s':>7} {'CPU s':>7} {'wall ms/node':>13} {'CPU ms/node':>12} "
        f"{'CPU ms/added node':>18} {'RSS MiB':>8}  verdict"
    )
    previous: tuple[int, float] | None = None
    for count, m, ok in rows:
        wall, cpu_s = float(m["wall"]), float(m["cpu"])
        added = (
            f"{(cpu_s - previous[1]) / (count - previous[0]) * 1e3:>18.3f}"
            if previous and count > previous[0]
            else f"{'':>18}"
        )
        previous = (count, cpu_s)
        print(
            f"{count:>7,} {wall:>7.2f} {cpu_s:>7.2f} {wall / count * 1e3:>13.3f} "
            f"{cpu_s / count * 1e3:>12.3f} {added} {float(m['rss_mb']):>8.0f}  "
            f"{'correct' if ok else 'WRONG'}"
        )
    (n0, m0, _), (n1, m1, _) = rows[0], rows[-1]
    ratio_cpu = (float(m1["cpu"]) / n1) / (float(m0["cpu"]) / n0)
    ratio_wall = (float(m1["wall"]) / n1) / (float(m0["wall"]) / n0)
    print(
        f"per-node cost at {n1:,} nodes / at {n0:,} (the baseline, this run): CPU "
        f"{ratio_cpu:.2f}x, wall {ratio_wall:.2f}x (goal <= 1.25)"
    )
    if len(rows) > 2:  # the fixed cost (job output, rules) weighs on the smallest count most
        (a, ma, _), (b, mb, _) = rows[0], rows[1]
        (c, mc, _), (d, md, _) = rows[-2], rows[-1]
        first = (float(mb["cpu"]) - float(ma["cpu"])) / (b - a)
        last = (float(md["cpu"]) - float(mc["cpu"])) / (d - c)
        print(
            f"CPU per added node, {c:,}->{d:,} / {a:,}->{b:,}: {last / max(first, 1e-9):.2f}x "
            f"({last * 1e3:.3f} / {first * 1e3:.3f} ms)"
        )
    print(f"before: {BEFORE_SWEEP}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", help="a node count, or several (comma-separated) for a sweep")
    ap.add_argument("--preset", choices=sorted(PRESETS))
    ap.add_argument("--job-output-mb", type=int)
    ap.add_argument("--node-log-kb", type=int)
    ap.add_argument("--job-hours", type=float)
    ap.add_argument("--gpus-per-node", type=int, help="writes gres_detail and exclusive")
    ap.add_argument("--repeat", type=int, default=1, help="runs per bundle (the best is shown)")
    ap.add_argument("--delete", action="store_true", help="remove the bundle after the run")
    ap.add_argument("--dir", default="/tmp/attribution-bench/job")
    ap.add_argument("--run", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        run(Path(args.run))
        return
    preset = PRESETS[args.preset] if args.preset else {}
    nodes = args.nodes or str(preset.get("nodes", "1024"))
    counts = [int(x) for x in nodes.split(",") if x.strip()]
    defaults = {**(SWEEP if len(counts) > 1 else SINGLE), "job_hours": 6.0, "gpus_per_node": 0}
    for key, value in {**defaults, **preset}.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)
    if len(counts) > 1:
        sweep(args, counts)
    else:
        single(args, counts[0])


if __name__ == "__main__":
    main()
