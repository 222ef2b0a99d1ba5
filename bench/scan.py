#!/usr/bin/env python3
"""Benchmark the line pre-filter against ripgrep on the same corpus and the same patterns.

Usage: uv run python bench/scan.py [--size-mb 1024] [--seed 1] [--dir /tmp/attribution-bench]

It writes a seeded corpus (mostly benign training/NCCL/kernel lines, rare real
signature lines taken from the shipped rules' examples, some very long lines
and some invalid UTF-8), then in one run measures:

* ``ripgrep``: ``rg --byte-offset -F -f literals.txt`` (fixed strings, the
  same literals; matching lines reported by byte offset);
* ``attribution/<engine>``: ``LiteralScanner.line_starts`` over 8 MiB blocks,
  for every engine installed (hyperscan, re2, python), reporting the same
  byte offsets;
* ``attribution pipeline``: the whole reading path (block scan, decode, prefix
  and time parsing, extractor regexes) through ``SourceReader`` + ``Extractor``.

It prints MB/s for each (best of three, page cache warm), the ratio to
ripgrep, and whether every method found the same lines. If ``rg`` is not on
PATH it is installed from PyPI (package ``ripgrep``) into this environment.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attribution.rules.compiled import RuleSet  # noqa: E402
from attribution.rules.examples import iter_examples  # noqa: E402
from attribution.rules.extract import Extractor  # noqa: E402
from attribution.rules.loader import load_ruleset  # noqa: E402
from attribution.rules.schema import ExtractorRule, LineExample  # noqa: E402
from attribution.scan import Literal, LiteralScanner, available_engines  # noqa: E402

BENIGN = [
    "[2025-06-01 10:{m:02d}:{s:02d},118] [INFO] step {i} loss {loss:.4f} lr 3.0e-04 grad_norm 1.{g:03d} tokens/s 81{t:03d}",
    "gpu{n:03d}:{p}:{p2} [{d}] NCCL INFO Channel {c:02d}/32 : {d} {d2} via P2P/IPC/read",
    'Jun  1 10:{m:02d}:{s:02d} gpu{n:03d} kernel: [{up}.{us:06d}] audit: type=1400 audit({up}.{us}:1): apparmor="STATUSONLY"',
    "Epoch 3:  {pct}%|#####     | {i}/100000 [12:{m:02d}<20:{s:02d}, 81.{g:02d}it/s, loss={loss:.3f}]",
    "Jun  1 10:{m:02d}:{s:02d} gpu{n:03d} systemd[1]: Started Session {i} of user slurm.",
    "[rank{d}]:[I0601 10:{m:02d}:{s:02d}.{us:06d} ProcessGroupNCCL.cpp:912] [PG 0 Rank {d}] ProcessGroupNCCL initialization options: size: 1024",
]


def signature_lines() -> list[str]:
    """Real signature lines: every extractor's ``match`` example (first line of each)."""
    rules = load_ruleset()
    out = []
    for case in iter_examples(rules):
        rule = rules.rule(case.rule_id)
        if isinstance(rule, ExtractorRule) and case.group == "match":
            item = case.payload
            text = item.line if isinstance(item, LineExample) else str(item)
            out.append(text.split("\n")[0])
    return out


def write_corpus(path: Path, size: int, seed: int) -> None:
    rnd = random.Random(seed)
    signatures = signature_lines()
    written = 0
    i = 0
    with path.open("wb") as fh:
        while written < size:
            block = []
            for _ in range(4096):
                i += 1
                r = rnd.random()
                if r < 0.0004:
                    line = rnd.choice(signatures)
                elif r < 0.0006:
                    line = "x" * rnd.randrange(70_000, 200_000)  # a huge line
                else:
                    line = rnd.choice(BENIGN).format(
                        i=i,
                        m=i % 60,
                        s=(i // 60) % 60,
                        loss=rnd.random() * 3,
                        g=i % 1000,
                        t=i % 1000,
                        n=i % 1024,
                        p=1000 + i % 97,
                        p2=2000 + i % 89,
                        d=i % 8,
                        d2=(i + 1) % 8,
                        c=i % 32,
                        up=100000 + i // 10,
                        us=i % 1000000,
                        pct=i % 100,
                    )
                data = line.encode()
                if rnd.random() < 0.0005:
                    data = data[:20] + b"\xff\xfe\x00\xc3" + data[20:]  # invalid UTF-8 and a NUL
                block.append(data)
            chunk = b"\n".join(block) + b"\n"
            fh.write(chunk)
            written += len(chunk)


def find_rg() -> str:
    found = shutil.which("rg")
    if found:
        return found
    bindir = Path(sys.executable).parent
    if not (bindir / "rg").exists():
        uv = shutil.which("uv")
        # wheels only: the newest release may be source-only (a Rust build)
        cmd = (
            [uv, "pip", "install", "--only-binary", ":all:", "--python", sys.executable, "ripgrep"]
            if uv
            else [sys.executable, "-m", "pip", "install", "--only-binary", ":all:", "ripgrep"]
        )
        print("installing ripgrep from PyPI:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return str(bindir / "rg")


def best_of(n: int, fn):  # type: ignore[no-untyped-def]
    best, result = float("inf"), None
    for _ in range(n):
        t = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t)
    return best, result


def scan_offsets(path: Path, scanner: LiteralScanner) -> set[int]:
    """Byte offsets of the lines that contain a literal, scanning 8 MiB blocks."""
    found: set[int] = set()
    base = 0
    carry = b""
    with path.open("rb") as fh:
        while True:
            data = fh.read(8 << 20)
            buf = carry + data if carry else data
            if not buf:
                break
            cut = len(buf) if not data else buf.rfind(b"\n") + 1
            if cut == 0:
                carry = buf
                continue
            block, carry = buf[:cut], buf[cut:]
            found.update(base + start for start in scanner.line_starts(block))
            base += len(block)
            if not data:
                break
    return found


def scan_offsets_rg(rg: str, path: Path, patterns: Path) -> set[int]:
    cmd = [
        rg,
        "--byte-offset",
        "--no-line-number",
        "--no-filename",
        "-a",
        "-F",
        "-f",
        str(patterns),
        str(path),
    ]
    out = subprocess.run(cmd, capture_output=True, check=False).stdout
    return {int(line.split(b":", 1)[0]) for line in out.splitlines() if line}


def pipeline(path: Path, rules: RuleSet) -> int:
    from attribution.model import Stream
    from attribution.scan import reading_plan
    from attribution.sources.specs import ReadContext, SourceSpec
    from attribution.sources.textlog import SourceReader

    selectors, follow, notable, sampling, heads = reading_plan(rules)
    ctx = ReadContext(
        selectors=selectors, follow=follow, notable=notable, sampling=sampling, heads=heads
    )
    extractor = Extractor(rules)
    events = 0
    for stream in (Stream.JOB_STDOUT,):
        reader = SourceReader(SourceSpec(stream, None, [path]), ctx)
        for line in reader.lines():
            events += len(extractor.extract(line))
    return events


# A training job's output as it is on a real cluster: rank 0's steps, a progress bar, NCCL
# INFO from every rank at start-up and on each new communicator, data loader and checkpoint
# chatter, Python warnings; then the failure (one GPU lost: XID 79 on its node, NCCL errors
# from the other ranks).
JOB_LINES = [
    "[2026-05-20 {hh}:{mm}:{ss},118] [INFO] [rank0] step {i} | loss {loss:.4f} | lr 3.0e-04 | grad_norm {g:.3f} | tokens/s 81{t:03d}",
    "Epoch 3:  {pct}%|#####     | {i}/2000000 [{hh}:{mm}<20:{ss}, 1.{g3:02d}it/s, loss={loss:.3f}, v_num=0]",
    "gpu{n:03d}:{p}:{p2} [{d}] NCCL INFO Channel {c:02d}/32 : {d} {d2} via P2P/IPC/read",
    "gpu{n:03d}:{p}:{p2} [{d}] NCCL INFO comm 0x55d3a0 rank {r} nRanks 128 nNodes 16 localRanks 8 localRank {d} MNNVL 0",
    "[2026-05-20 {hh}:{mm}:{ss},204] [INFO] [rank{r}] dataloader worker {d} prefetched shard {i} in {g:.1f} ms",
    "[2026-05-20 {hh}:{mm}:{ss},377] [INFO] [rank0] saved checkpoint /lustre/ckpt/step{i} in 41.{d} s",
    "/opt/venv/lib/python3.11/site-packages/torch/utils/checkpoint.py:{c}: UserWarning: torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly.",
    "[rank{r}]:[W520 {hh}:{mm}:{ss}.{us:06d} ProcessGroupNCCL.cpp:1168] Warning: TORCH_NCCL_AVOID_RECORD_STREAMS is the default now",
]
JOB_WEIGHTS = [30, 10, 25, 0.2, 20, 1, 4, 5]  # a communicator's set-up line is rare
KERNEL_LINES = [
    '2026-05-20T{hh}:{mm}:{ss}.{us:06d}+00:00 gpu{n:03d} kernel: audit: type=1400 audit({i}.118:{c}): apparmor="STATUSONLY" profile="snap.lxd"',
    "2026-05-20T{hh}:{mm}:{ss}.{us:06d}+00:00 gpu{n:03d} kernel: perf: interrupt took too long ({i} > 2500), lowering kernel.perf_event_max_sample_rate to 79500",
    "2026-05-20T{hh}:{mm}:{ss}.{us:06d}+00:00 gpu{n:03d} systemd[1]: Started session-{i}.scope - Session {i} of User slurm.",
    "2026-05-20T{hh}:{mm}:{ss}.{us:06d}+00:00 gpu{n:03d} slurmd[2301]: launch task StepId={i}.0 request from UID:1001 GID:1001 HOST:10.0.0.1 PORT:51234",
]


def _fill(template: str, i: int, total: int, n: int) -> str:
    t = 8 * 3600 + 6 * 3600 * i // max(total, 1)  # 08:00 to 14:00
    return template.format(
        hh=f"{t // 3600:02d}",
        mm=f"{t // 60 % 60:02d}",
        ss=f"{t % 60:02d}",
        us=i % 1_000_000,
        i=i,
        loss=2.5 - i / (total + 1),
        g=1 + i % 97 / 100,
        g3=i % 100,
        t=i % 1000,
        pct=100 * i // max(total, 1),
        n=n,
        p=1000 + i % 97,
        p2=2000 + i % 89,
        d=i % 8,
        d2=(i + 1) % 8,
        r=i % 128,
        c=i % 32,
    )


def write_bundle(root: Path, size: int, seed: int) -> None:
    """A 16-node, 128-GPU job: ``size`` bytes in all, 80 % job output, 20 % kernel logs
    (inside the job window, so every byte is the job's evidence and both tools read it all)."""
    rnd = random.Random(seed)
    nodes = 16
    record = {
        "job_id": "4242",
        "state": "FAILED",
        "exit_code": "1:0",
        "nodes": f"gpu[001-{nodes:03d}]",
        "start": "2026-05-20T08:00:00",
        "end": "2026-05-20T14:05:00",
        "timezone": "UTC",
    }
    (root / "job").mkdir(parents=True, exist_ok=True)
    (root / "job.json").write_text(json.dumps(record))
    out_size = size * 8 // 10
    lines = out_size // 110
    with (root / "job" / "stdout.log").open("w") as fh:
        batch = []
        for i in range(lines):
            template = rnd.choices(JOB_LINES, JOB_WEIGHTS)[0]
            batch.append(_fill(template, i, lines, 1 + i % nodes))
            if len(batch) >= 50_000:
                fh.write("\n".join(batch) + "\n")
                batch = []
        batch += [
            "gpu003:1003:2003 [3] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got completion from peer 10.0.0.7<51234> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.3 remoteGid ::ffff:10.0.0.7 hca mlx5_3",
            "[rank19]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
            "[rank19]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        ]
        fh.write("\n".join(batch) + "\n")
    per_node = size * 2 // 10 // nodes // 120
    for n in range(1, nodes + 1):
        path = root / "nodes" / f"gpu{n:03d}" / "kern.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as fh:
            rows = [_fill(KERNEL_LINES[i % 4], i, per_node, n) for i in range(per_node)]
            if n == 7:  # the lost GPU, five hours into the job
                at = per_node * 5 // 6
                rows.insert(
                    at,
                    "2026-05-20T13:00:01.000000+00:00 gpu007 kernel: NVRM: Xid (PCI:0000:bb:00): 79,"
                    " pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
                )
            fh.write("\n".join(rows) + "\n")


def bench_bundle(rg: str, patterns: Path, workdir: Path, size_mb: int, seed: int) -> None:
    """``sattr diagnose --json`` on a realistic bundle (the whole command: start-up, rules,
    reading, the verdict) against ripgrep with the same literals over the same files."""
    root = workdir / f"bundle-{size_mb}mb-{seed}"
    if not (root / "job.json").exists():
        print(f"writing a {size_mb} MB bundle to {root} ...", flush=True)
        write_bundle(root, size_mb << 20, seed)
    files = sorted(p for p in root.rglob("*.log"))
    size = sum(p.stat().st_size for p in files) / 1e6
    os.system(f"cat {' '.join(map(str, files))} > /dev/null")
    rg_cmd = [rg, "-a", "-F", "-c", "-f", str(patterns), *map(str, files)]
    rg_time, _ = best_of(3, lambda: subprocess.run(rg_cmd, capture_output=True, check=False))
    sattr = Path(sys.executable).parent / "sattr"
    cmd = [str(sattr), "diagnose", str(root), "--json"]
    ours, done = best_of(3, lambda: subprocess.run(cmd, capture_output=True, check=False))
    verdict = json.loads(done.stdout) if done.stdout else {}
    cause = (verdict.get("cause") or {}).get("rule", "?")
    nodes = ",".join(r.get("node") or "?" for r in verdict.get("responsible") or []) or None
    print(f"\nbundle: {size:.0f} MB in {len(files)} files (job output and 16 node kernel logs)")
    print(f"{'method':<28}{'MB/s':>10}{'vs ripgrep':>12}  seconds")
    print(f"{'ripgrep -F -c (same files)':<28}{size / rg_time:>10.0f}{1.0:>11.2f}x  {rg_time:.2f}")
    print(
        f"{'sattr diagnose --json':<28}{size / ours:>10.0f}{rg_time / ours:>11.2f}x  {ours:.2f}"
        f"  cause={cause} nodes={nodes}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", default="/tmp/attribution-bench")
    ap.add_argument("--bundle-mb", type=int, default=1024, help="realistic bundle (0: skip)")
    ap.add_argument("--bundle-only", action="store_true", help="skip the corpus tables")
    args = ap.parse_args()
    workdir = Path(args.dir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.bundle_only:
        rules = load_ruleset()
        patterns = workdir / "literals.txt"
        exact = sorted(
            {lit for ex in rules.extractors if not ex.rule.match.ignore_case for lit in ex.literals}
        )
        patterns.write_text("\n".join(exact) + "\n")
        bench_bundle(find_rg(), patterns, workdir, args.bundle_mb, args.seed)
        return
    corpus = workdir / f"corpus-{args.size_mb}mb-{args.seed}.log"
    if not corpus.exists():
        print(f"writing {args.size_mb} MB corpus to {corpus} ...", flush=True)
        write_corpus(corpus, args.size_mb << 20, args.seed)
    size_mb = corpus.stat().st_size / 1e6
    rules = load_ruleset()
    literals = sorted(
        {(lit, ex.rule.match.ignore_case) for ex in rules.extractors for lit in ex.literals}
    )
    patterns = workdir / "literals.txt"
    patterns.write_text("\n".join(lit for lit, caseless in literals if not caseless) + "\n")
    exact = [Literal(lit.encode()) for lit, caseless in literals if not caseless]
    print(
        f"corpus: {size_mb:.0f} MB, {len(exact)} literals (case-sensitive ones; ripgrep -F takes one case mode)"
    )
    os.system(f"cat {corpus} > /dev/null")  # warm the page cache

    rg = find_rg()
    rg_version = subprocess.run([rg, "--version"], capture_output=True, text=True).stdout.split(
        "\n"
    )[0]
    rg_time, rg_lines = best_of(3, lambda: scan_offsets_rg(rg, corpus, patterns))
    print(f"{'method':<28}{'MB/s':>10}{'vs ripgrep':>12}  lines  same")
    print(f"{rg_version:<28}{size_mb / rg_time:>10.0f}{1.0:>11.2f}x  {len(rg_lines):>5}  -")
    for engine in available_engines():
        scanner = LiteralScanner(exact, engine)
        runs = 1 if engine == "python" and size_mb > 300 else 3
        t, ours = best_of(runs, lambda s=scanner: scan_offsets(corpus, s))
        same = "yes" if ours == rg_lines else f"NO ({len(ours ^ rg_lines)} differ)"
        print(
            f"{'attribution/' + engine:<28}{size_mb / t:>10.0f}{rg_time / t:>11.2f}x  {len(ours):>5}  {same}"
        )
    rules = load_ruleset()  # loaded once, outside the timing (the bundle below times it)
    t, events = best_of(3, lambda: pipeline(corpus, rules))
    print(f"{'attribution pipeline':<28}{size_mb / t:>10.0f}{rg_time / t:>11.2f}x  events={events}")
    if args.bundle_mb:
        bench_bundle(rg, patterns, workdir, args.bundle_mb, args.seed)


if __name__ == "__main__":
    main()
