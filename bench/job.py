#!/usr/bin/env python3
"""Benchmark one big diagnosis: a 1,024-node job, its output and a month of kernel log per node.

Usage: uv run python bench/job.py [--nodes 1024] [--job-output-mb 2048] [--node-log-mb 8]
                                  [--job-hours 6] [--dir /tmp/attribution-bench/job]

It writes an evidence bundle (kept between runs): ``job/stdout.log`` of the
given size (training progress, NCCL INFO, and at the end the NCCL errors that
follow a lost GPU), and for every node a ``kern.log`` spanning 30 days
(syslog format) with the job's hours in the middle; one node logs an XID 79
during the job. Then, in a fresh process, it diagnoses the bundle the way
``sattr diagnose`` does and prints:

* wall time of the diagnosis;
* bytes actually read (the process's read syscalls, /proc/self/io ``rchar``)
  against bytes on disk, for node logs and job output separately, and the
  node-log bytes that lie inside the job window;
* peak RSS of the diagnosing process;
* the verdict (it must name the node with the XID).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

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


def node_name(i: int) -> str:
    return f"node{i:04d}"


def write_node_log(path: Path, node: str, template: bytes, xid: bytes | None) -> None:
    data = template.replace(b"HOSTNAME", node.encode())
    if xid is not None:
        cut = data.index(b"\n", data.index(b"XIDSLOT") - 200) + 1
        data = data[:cut] + xid + data[cut:]
    data = data.replace(b"XIDSLOT ", b"")
    path.write_bytes(data)


def node_template(size: int, job_end: datetime) -> tuple[bytes, int]:
    """One node's month of kernel/syslog lines (hostname placeholder) and bytes inside the window."""
    sample = len(CHATTER[0]) + 40
    lines = max(1000, size // sample)
    step = DAYS * 86400 / lines
    out = []
    inside = 0
    lo, hi = JOB_START - timedelta(seconds=300), job_end + timedelta(seconds=300)
    marked = False
    for i in range(lines):
        t = LOG_START + timedelta(seconds=i * step)
        text = CHATTER[i % len(CHATTER)].format(up=i * step, i=i)
        line = f"{t.strftime('%b %d %H:%M:%S')} HOSTNAME {text}"
        if not marked and t >= JOB_START + (job_end - JOB_START) / 2:
            line = "XIDSLOT " + line
            marked = True
        if lo <= t <= hi:
            inside += len(line) + 1 - len("HOSTNAME") + 8
        out.append(line)
    return ("\n".join(out) + "\n").encode(), inside


def write_job_output(path: Path, size: int, nodes: list[str], bad: str) -> None:
    block_lines = []
    for i in range(20000):
        block_lines.append(
            f"[2026-05-20 09:{i % 60:02d}:{(i // 60) % 60:02d},118] [INFO] step {i} loss {2.5 - i * 1e-5:.5f} lr 3.0e-04 grad_norm 1.02 tokens/s 812331"
        )
        if i % 50 == 0:
            n = nodes[i % len(nodes)]
            block_lines.append(
                f"{n}:{1000 + i % 97}:{2000 + i % 89} [{i % 8}] NCCL INFO Channel {i % 32:02d}/32 : {i % 8} {(i + 1) % 8} via P2P/IPC/read"
            )
    block = ("\n".join(block_lines) + "\n").encode()
    with path.open("wb") as fh:
        written = 0
        while written + len(block) < size:
            fh.write(block)
            written += len(block)
        tail = []
        for r, n in enumerate(nodes[:64]):
            if n == bad:
                continue
            tail.append(
                f"{n}:{3000 + r}:{3100 + r} [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer {bad}<{40000 + r}>"
            )
            tail.append(
                f"[rank{r * 8}]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely."
            )
        fh.write(("\n".join(tail) + "\n").encode())


def generate(root: Path, args: argparse.Namespace) -> dict[str, int]:
    nodes = [node_name(i) for i in range(1, args.nodes + 1)]
    bad = nodes[len(nodes) // 2]
    job_end = JOB_START + timedelta(hours=args.job_hours)
    xid_at = JOB_START + timedelta(hours=args.job_hours / 2)
    root.mkdir(parents=True, exist_ok=True)
    (root / "job").mkdir(exist_ok=True)
    template, inside = node_template(args.node_log_mb << 20, job_end)
    xid = f"{xid_at.strftime('%b %d %H:%M:%S')} {bad} kernel: [1641600.000000] NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n".encode()
    for n in nodes:
        d = root / "nodes" / n
        d.mkdir(parents=True, exist_ok=True)
        write_node_log(d / "kern.log", n, template, xid if n == bad else None)
    write_job_output(root / "job" / "stdout.log", args.job_output_mb << 20, nodes, bad)
    job = {
        "cluster": "bench",
        "job_id": "777",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": f"node[0001-{args.nodes:04d}]",
        "start": JOB_START.isoformat(),
        "end": job_end.isoformat(),
        "user": "bench",
    }
    (root / "job.json").write_text(json.dumps(job))
    meta = {"window_bytes": inside * len(nodes), "bad": bad}
    (root / "bench-meta.json").write_text(json.dumps(meta))
    return meta


def rchar() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def run(root: Path) -> None:
    """Diagnose in this (fresh) process and print one JSON line of measurements."""
    from attribution.bundle import diagnose_bundle
    from attribution.rules.loader import load_ruleset

    rules = load_ruleset()
    before = rchar()
    t0 = time.perf_counter()
    _, verdict = diagnose_bundle(root, rules)
    wall = time.perf_counter() - t0
    read = rchar() - before
    node_read = sum(c.bytes for c in verdict.coverage if c.node)
    job_read = sum(c.bytes for c in verdict.coverage if not c.node)
    print(
        json.dumps(
            {
                "wall": wall,
                "rchar": read,
                "node_read": node_read,
                "job_read": job_read,
                "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "sub_domain": verdict.sub_domain.value,
                "nodes": [r.node for r in verdict.responsible],
                "cause": verdict.cause.id if verdict.cause else None,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1024)
    ap.add_argument("--job-output-mb", type=int, default=2048)
    ap.add_argument("--node-log-mb", type=int, default=8)
    ap.add_argument("--job-hours", type=float, default=6.0)
    ap.add_argument("--dir", default="/tmp/attribution-bench/job")
    ap.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    root = (
        Path(args.dir)
        / f"n{args.nodes}-j{args.job_output_mb}-l{args.node_log_mb}-h{args.job_hours:g}"
    )
    if args.run:
        run(root)
        return
    if not (root / "bench-meta.json").exists():
        print(f"writing the bundle under {root} ...", flush=True)
        t = time.perf_counter()
        generate(root, args)
        print(f"  written in {time.perf_counter() - t:.0f} s", flush=True)
    meta = json.loads((root / "bench-meta.json").read_text())
    node_disk = sum(p.stat().st_size for p in (root / "nodes").rglob("*") if p.is_file())
    job_disk = sum(p.stat().st_size for p in (root / "job").rglob("*") if p.is_file())
    subprocess.run(
        ["sh", "-c", f"cat {root}/job/* > /dev/null"], check=False
    )  # warm cache, as a worker would meet it
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--run",
            "--dir",
            args.dir,
            "--nodes",
            str(args.nodes),
            "--job-output-mb",
            str(args.job_output_mb),
            "--node-log-mb",
            str(args.node_log_mb),
            "--job-hours",
            str(args.job_hours),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    m = json.loads(out.stdout.strip().splitlines()[-1])
    gb = 1e9
    print(
        f"job: {args.nodes} nodes, {args.job_hours:g} h; evidence on disk {(node_disk + job_disk) / gb:.2f} GB "
        f"(node logs {node_disk / gb:.2f} GB over {DAYS} days, job output {job_disk / gb:.2f} GB)"
    )
    print(f"wall time            {m['wall']:.1f} s")
    print(
        f"read (rchar)         {m['rchar'] / gb:.2f} GB of {(node_disk + job_disk) / gb:.2f} GB on disk"
    )
    print(
        f"node logs read       {m['node_read'] / 1e6:.1f} MB; inside the job window {meta['window_bytes'] / 1e6:.1f} MB "
        f"-> {m['node_read'] / max(1, meta['window_bytes']):.2f}x the window"
    )
    print(f"job output read      {m['job_read'] / gb:.2f} GB of {job_disk / gb:.2f} GB")
    print(f"peak RSS             {m['rss_mb']:.0f} MiB")
    ok = m["sub_domain"] == "hardware" and m["nodes"] == [meta["bad"]]
    print(
        f"verdict              {m['sub_domain']} {m['cause']} {m['nodes']} ({'correct' if ok else 'WRONG'})"
    )


if __name__ == "__main__":
    main()
