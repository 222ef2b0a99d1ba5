"""Strategies and properties shared by the fuzz tests (tests/fuzz/test_*.py) and bench/fuzz.py.

Each property is a plain function ``check_*(example, ruleset)`` that raises ``AssertionError``
(or lets the exception escape) when the example breaks it; ``TARGETS`` pairs each with the
strategy that feeds it, so pytest and the bench run exactly the same thing.

The log lines are built from fragments of real formats (kernel XID and NVSwitch SXid lines,
Fabric Manager, NCCL, slurmstepd, srun, slurmctld, Python and CUDA errors; the line shapes of
the vendors' documentation as the shipped rules cite them) and from every inline example of
the shipped extractors, then mutated: spliced, repeated, cut, given lone surrogates, invalid
UTF-8, control characters, numbers of thousands of digits and host lists with absurd bounds.
"""

from __future__ import annotations

import bz2
import codecs
import functools
import gzip
import io
import json
import lzma
import os
import re
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from rich.console import Console

from attribution.bundle import diagnose_bundle, read_job
from attribution.errors import BundleError
from attribution.model import CoverageStatus, Stream, Verdict, verdict_to_dict
from attribution.render import verdict_view
from attribution.rules.compiled import RuleSet
from attribution.rules.schema import ExtractorRule
from attribution.sources import reader
from attribution.sources.reader import DEFAULT_MAX_LINE
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.textlog import SourceReader

if sys.version_info >= (3, 14):
    from compression import zstd
else:  # the same module, backported (PyPI backports.zstd)
    from backports import zstd

EXAMPLES = int(os.environ.get("ATTRIBUTION_FUZZ_EXAMPLES", "50"))
# seconds one example may take (a tiny bundle diagnoses in milliseconds; this catches hangs)
EXAMPLE_SECONDS = float(os.environ.get("ATTRIBUTION_FUZZ_SECONDS", "20"))


def fuzz_settings(examples: int = EXAMPLES, *, derandomize: bool = True) -> settings:
    """The settings of every fuzz test: a fixed sequence of examples (``derandomize``), no
    example database (a run never depends on an earlier one), no deadline (the time bound is
    ``EXAMPLE_SECONDS``, checked by each property)."""
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=derandomize,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


FUZZ = fuzz_settings()
# for the properties that are cheap and narrow (one per encoding): a tenth of the examples
FUZZ_LIGHT = fuzz_settings(max(10, EXAMPLES // 10))

# ---------------------------------------------------------------------------- the job

JOB_NODES = ("gpu-a01", "gpu-a02", "gpu-a03", "gpu-a04")
JOB = {
    "cluster": "c1",
    "job_id": "777",
    "state": "FAILED",
    "exit_code": "1:0",
    "nodes": "gpu-a[01-04]",
    "start": "2026-01-01T10:00:00",
    "end": "2026-01-01T11:00:00",
    "user": "alice",
    "uid": 1001,
}
STATES = (
    ("FAILED", "1:0"),
    ("FAILED", "0:9"),
    ("CANCELLED by 1001", "0:15"),
    ("TIMEOUT", "0:0"),
    ("OUT_OF_MEMORY", "0:125"),
    ("COMPLETED", "0:0"),
    ("NODE_FAIL", "0:0"),
)
# nodes outside the job: names no text of a verdict contains unless it names such a node
OUTSIDE_NODES = ("ghost01", "ghost02", "ghost17", "gpu-z07", "gpu-z08")
OUTSIDE_LISTS = ("ghost[01-03]", "ghost[01-64]", "gpu-z[07-08]", "ghost[001-011,013-064]")
OUTSIDE_TEXT = re.compile(r"\b(?:ghost|gpu-z)[\d\[][\w\[\],-]*", re.IGNORECASE)
IN_JOB_LISTS = ("gpu-a[01-04]", "gpu-a[01-02,04]", "gpu-a[02-03]", "gpu-a01,gpu-a03")
TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/home/alice/train.py", line 42, in <module>',
    "    main()",
    "RuntimeError: step failed",
)
# an instruction to drain a node ("Do not drain on this alone" is the opposite)
DRAIN = re.compile(r"(?<![Nn]ot )\bdrain\b(?!ed|ing)|DRAIN_AND_RESET", re.IGNORECASE)

# ---------------------------------------------------------------------------- fragments

STAMP = "2026-01-01T10:{m:02d}:{s:02d}+00:00"

# Line shapes with a node in them ({node}: one name; {nodes}: a name, a comma list or a host
# list; {ts}: a time in the job). Written from the formats the shipped rules document.
NODE_TEMPLATES = (
    "slurmstepd: error: *** STEP 777.0 ON {node} UNCORRECTABLE MEMORY ERROR AT 2026-01-01T10:30:00 ***",
    "slurmstepd: error: *** JOB 777 ON {node} CANCELLED AT 2026-01-01T10:30:00 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    "slurmstepd: error: *** STEP 777.0 STEPD TERMINATED ON {node} AT 2026-01-01T10:31:00 DUE TO JOB NOT ENDING WITH SIGNALS ***",
    "slurmstepd: error: *** STEP 777.0 ON {node} CANCELLED AT 2026-01-01T10:30:00 DUE TO TASK FAILURE ***",
    "slurmstepd: error: *** STEP 777.0 ON {node} FAILED (non-zero exit code or other failure mode) ***",
    "srun: error: Node failure on {nodes}",
    "srun: error: {nodes}: tasks 0-10,12-63: Terminated",
    "srun: error: {nodes}: task 3: Killed",
    "srun: error: {nodes}: tasks 0-7: Bus error",
    "srun: error: {nodes}: task 0: Exited with exit code 1",
    "srun: error: {nodes}: tasks 1-3: Out Of Memory",
    "srun: error: Task launch for StepId=777.0 failed on node {node}: Communication connection failure",
    "salloc: Prolog failure on node {node}",
    "Killing JobId=777 on failed node {node}",
    "[2026-01-01T10:30:00.000] error: Nodes {nodes} not responding, setting DOWN",
    "[2026-01-01T10:30:00.000] update_node: node {node} reason set to: Kill task failed",
    "[2026-01-01T10:30:00.000] error: slurmd error running JobId=777 on node(s)={nodes}: Kill task failed",
    "[2026-01-01T10:30:00.000] validate_node_specs: Node {node} unexpectedly rebooted boot_time=1767261600 last response=1767261500",
    "{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No",
    "{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 48, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 4, subpartition 1",
    "{ts} {node} kernel: NVRM: Xid (PCI:0000:3b:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 1",
    "{ts} {node} kernel: nvidia-nvswitch0: SXid (PCI:0000:07:00.0): 20034, Fatal, Link 28 LTSSM Fault Up",
    "{ts} {node} kernel: EDAC MC0: 1 UE memory read error on CPU_SrcID#0_MC#0_Chan#2_DIMM#0 (channel:2 slot:0)",
    "{ts} {node} kernel: mce: [Hardware Error]: Machine check: Processor context corrupt",
    "{ts} {node} kernel: Kernel panic - not syncing: Fatal exception",
    "{ts} {node} kernel: NMI watchdog: Watchdog detected hard LOCKUP on cpu 12",
    "{ts} {node} kernel: pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
    "{ts} {node} dcgm-health[2871]: Error calling NVML API nvmlDeviceGetHandleByIndex: GPU is lost",
    "{node}: Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU",
    "[Jan 01 2026 10:30:00] [ERROR] [tid 841] detected NVSwitch fatal error 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33 on {node}",
    "{node}:1234:1300 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.0.0.9<50112> with status=12 opcode=1 len=0 vendor err 129 (Send)",
    "{node}:1234:1300 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer {node}<33790>",
    "{node}:1234:1300 [0] NCCL INFO NET/IB : Got async event : port error",
    "{node}:1234:1300 [3] NCCL INFO comm 0x55aa rank 3 nranks 32 cudaDev 3 busId 3b000 commId 0x4d1e - Init COMPLETE",
    "[rank3]: torch.distributed.DistNetworkError: Connection reset by peer; the peer was {node}:29500",
    "[rank7]:[E101 10:41:02.123456418 ProcessGroupNCCL.cpp:607] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=4661, NumelOut=4661, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.",
    "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: unspecified launch failure",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)",
    "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1",
    "Traceback (most recent call last):",
    "RuntimeError: step failed",
)
# what varies inside a real line besides the node
HUGE = ("9" * 5000, "1" + "0" * 40, "-" + "7" * 400, "0x" + "f" * 300)
ABSURD_LISTS = ("n[0-" + "9" * 5000 + "]", "n[1-99999999999]", "x[" + ",".join(["1"] * 500) + "]")
CONTROLS = (
    "\r",
    "\r\n",
    "\x1b[2J",
    "\x1b]0;t\x07",
    "\x00",
    "\t",
    "\x85",
    "\u2028",
    "\ufeff",
    "\x7f",
)
SURROGATES = ("\ud800", "\udfff", "\udc80")


@functools.cache
def example_lines() -> tuple[str, ...]:
    """Every inline example line (match and no_match) of the shipped extractors."""
    from attribution.rules.loader import load_ruleset

    out: list[str] = []
    for rule in load_ruleset().all_rules():
        if not isinstance(rule, ExtractorRule):
            continue
        for group in (rule.examples.match, rule.examples.no_match, rule.examples.todo):
            out += [x if isinstance(x, str) else x.line for x in group]
    return tuple(sorted(set(out)))


def _fill(template: str, node: str, nodes: str, ts: str) -> str:
    return template.replace("{nodes}", nodes).replace("{node}", node).replace("{ts}", ts)


stamps = st.builds(lambda m, s: STAMP.format(m=m, s=s), st.integers(0, 59), st.integers(0, 59))
any_node = st.sampled_from(JOB_NODES + OUTSIDE_NODES + ("node001", "gpu-node-17"))
any_nodes = st.one_of(
    any_node,
    st.sampled_from(IN_JOB_LISTS + OUTSIDE_LISTS + ABSURD_LISTS),
    st.lists(any_node, min_size=2, max_size=4).map(",".join),
)


@st.composite
def fragment(draw: st.DrawFn) -> str:
    """One line of a real format: a templated node line or an extractor's example line."""
    if draw(st.booleans()):
        return _fill(
            draw(st.sampled_from(NODE_TEMPLATES)), draw(any_node), draw(any_nodes), draw(stamps)
        )
    return draw(st.sampled_from(example_lines()))


def _at(draw: st.DrawFn, line: str) -> int:
    return draw(st.integers(0, len(line)))


@st.composite
def mutated_line(draw: st.DrawFn) -> str:
    """A fragment changed by up to three mutations."""
    line = draw(fragment())
    for op in draw(st.lists(st.sampled_from(MUTATIONS), max_size=3)):
        line = op(draw, line)
    return line


def _splice(draw: st.DrawFn, line: str) -> str:
    other = draw(fragment())
    return line[: _at(draw, line)] + other[_at(draw, other) :]


def _repeat(draw: st.DrawFn, line: str) -> str:
    return draw(st.sampled_from((" ", "", "\n", ","))).join([line] * draw(st.integers(2, 50)))


def _cut(draw: st.DrawFn, line: str) -> str:
    return line[: _at(draw, line)]


def _insert(draw: st.DrawFn, line: str, what: st.SearchStrategy[str]) -> str:
    i = _at(draw, line)
    return line[:i] + draw(what) + line[i:]


def _surrogate(draw: st.DrawFn, line: str) -> str:
    return _insert(draw, line, st.sampled_from(SURROGATES))


def _control(draw: st.DrawFn, line: str) -> str:
    return _insert(draw, line, st.sampled_from(CONTROLS))


def _text(draw: st.DrawFn, line: str) -> str:
    return _insert(draw, line, st.text(max_size=20))


def _long(draw: st.DrawFn, line: str) -> str:
    return _insert(draw, line, st.sampled_from(("A", " ", "[", "9", "é")).map(lambda c: c * 70_000))


def _bignum(draw: st.DrawFn, line: str) -> str:
    huge = draw(st.sampled_from(HUGE))
    return re.sub(r"\d+", lambda m: huge, line, count=draw(st.integers(0, 3)))


def _hostlist(draw: st.DrawFn, line: str) -> str:
    hl = draw(st.sampled_from(ABSURD_LISTS + IN_JOB_LISTS + OUTSIDE_LISTS))
    return re.sub(r"\b[a-z][\w-]*\d\b", lambda m: hl, line, count=1)


MUTATIONS: tuple[Callable[[st.DrawFn, str], str], ...] = (
    _splice,
    _repeat,
    _cut,
    _surrogate,
    _control,
    _text,
    _long,
    _bignum,
    _hostlist,
)


def encode(lines: list[str]) -> bytes:
    """Lines as a log file holds them; lone surrogates become invalid UTF-8 bytes."""
    return "".join(x + "\n" for x in lines).encode("utf-8", "surrogatepass")


# ---------------------------------------------------------------------------- bundles


@dataclass
class BundleCase:
    """A bundle to write: the job record and each file (path in the bundle -> bytes)."""

    job: dict[str, Any]
    files: dict[str, bytes] = field(default_factory=dict)
    raw_job: bytes | None = None  # job.json as these bytes instead of ``job``

    def write(self, root: Path) -> Path:
        root.mkdir(parents=True, exist_ok=True)
        data = self.raw_job
        if data is None:
            data = json.dumps(self.job, ensure_ascii=True).encode()
        (root / "job.json").write_bytes(data)
        (root / "job").mkdir(exist_ok=True)
        for node in JOB_NODES:
            (root / "nodes" / node).mkdir(parents=True, exist_ok=True)
        for name, body in self.files.items():
            path = root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(body)
        return root


def clean_kernel_log(node: str) -> bytes:
    """A kernel log that recorded before, during and after the job, with nothing wrong."""
    rows = [("09:58:00", "audit: type=1400 apparmor=STATUS")]
    rows += [(f"10:{m:02d}:00", f"systemd-journald[512]: time {m}") for m in range(0, 60, 15)]
    rows.append(("11:02:00", "audit: type=1400 apparmor=STATUS"))
    return "".join(f"2026-01-01T{t}+00:00 {node} kernel: {msg}\n" for t, msg in rows).encode()


# where a line may be put, and the prefixes a real file of that kind gives its lines
PLACES = {
    "job/stdout.log": ("", "0: ", "[rank3]: ", "gpu-a02: "),
    "job/stderr.log": ("", "1: ", "[rank0]: "),
    "nodes/gpu-a01/kernel.log": ("{ts} gpu-a01 kernel: ", "[ 1234.567890] ", ""),
    "nodes/gpu-a02/syslog.log": (
        "Jan  1 10:30:00 gpu-a02 kernel: ",
        "Jan  1 10:30:00 gpu-a02 alice[42]: ",
    ),
    "nodes/gpu-a03/fabricmanager.log": ("[Jan 01 2026 10:30:00] [ERROR] [tid 841] ", ""),
    "nodes/gpu-a04/dcgm.log": ("{ts} gpu-a04 dcgm-health[2871]: ", ""),
    "nodes/ghost01/kernel.log": ("{ts} ghost01 kernel: ",),
    "slurmctld.log": ("[2026-01-01T10:30:00.000] ", "[2026-01-01T10:30:00.000] error: "),
}


@st.composite
def diagnosis_bundles(draw: st.DrawFn) -> BundleCase:
    """A tiny bundle whose logs (job output, node logs, slurmctld) hold mutated lines."""
    state, code = draw(st.sampled_from(STATES))
    case = BundleCase({**JOB, "state": state, "exit_code": code})
    for place in draw(st.lists(st.sampled_from(sorted(PLACES)), min_size=1, max_size=4)):
        prefix = draw(st.sampled_from(PLACES[place]))
        lines = draw(st.lists(mutated_line(), min_size=1, max_size=6))
        ts = draw(stamps)
        body = [prefix.replace("{ts}", ts) + x for x in lines]
        if draw(st.booleans()):
            body = list(TRACEBACK) + body
        case.files[place] = case.files.get(place, b"") + encode(body)
    return case


@st.composite
def forged_bundles(draw: st.DrawFn) -> BundleCase:
    """Job output forging node faults (nodes in and outside the job, comma and host lists),
    clean kernel logs on every node of the job that record throughout it."""
    state, code = draw(st.sampled_from([s for s in STATES if s[0] != "NODE_FAIL"]))
    case = BundleCase({**JOB, "state": state, "exit_code": code})
    for node in JOB_NODES:
        case.files[f"nodes/{node}/kernel.log"] = clean_kernel_log(node)
    forged = []
    for _ in range(draw(st.integers(1, 6))):
        line = _fill(
            draw(st.sampled_from(NODE_TEMPLATES)), draw(any_node), draw(any_nodes), draw(stamps)
        )
        prefix = draw(st.sampled_from(("", "0: ", "[rank3]: ", "gpu-a02: ", "ghost01: ")))
        forged.append(prefix + line)
    if draw(st.booleans()):
        forged = list(TRACEBACK) + forged if draw(st.booleans()) else forged + list(TRACEBACK)
    stream = draw(st.sampled_from(("job/stdout.log", "job/stderr.log")))
    case.files["job/stdout.log"] = encode(forged if stream == "job/stdout.log" else [])
    if stream == "job/stderr.log":
        case.files["job/stderr.log"] = encode(forged)
    return case


# ---------------------------------------------------------------------------- properties


def _timed(what: str, fn: Callable[[], Any]) -> Any:
    began = time.monotonic()
    out = fn()
    took = time.monotonic() - began
    assert took < EXAMPLE_SECONDS, f"{what} took {took:.1f} s (bound {EXAMPLE_SECONDS:.0f} s)"
    return out


def _render(verdict: Verdict) -> str:
    json.dumps(verdict_to_dict(verdict))
    console = Console(file=io.StringIO(), width=120, force_terminal=False)
    console.print(verdict_view(verdict, verbose=True))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def diagnose_case(case: BundleCase, ruleset: RuleSet) -> Verdict:
    with tempfile.TemporaryDirectory(prefix="attribution-fuzz-") as tmp:
        root = case.write(Path(tmp) / "b")
        _, verdict = _timed("diagnosis", lambda: diagnose_bundle(root, ruleset, workers=1))
        return verdict


def check_diagnosis(case: BundleCase, ruleset: RuleSet) -> None:
    """No exception escapes a diagnosis of mutated lines; it ends in bounded time; the
    verdict serialises and renders."""
    verdict = diagnose_case(case, ruleset)
    _render(verdict)


def _named(text: str, output: str) -> list[str]:
    """Nodes outside the job that ``text`` names in its own words: a name that comes with the
    twelve characters before it, as they stand in the job's ``output``, is a quote of the job's
    message (its exception text), not the verdict naming the node."""
    return sorted(
        {
            m.group()
            for m in OUTSIDE_TEXT.finditer(text)
            if text[max(0, m.start() - 12) : m.end()] not in output
        }
    )


def check_blame(case: BundleCase, ruleset: RuleSet) -> None:
    """Job output alone never blames a node: nobody is responsible, nothing says to drain, and
    no node outside the job is named in responsible, suspects, summary or action."""
    verdict = diagnose_case(case, ruleset)
    output = b"".join(v for k, v in case.files.items() if k.startswith("job/")).decode(
        "utf-8", "replace"
    )
    problems = []
    if verdict.responsible:
        problems.append(f"responsible={[r.node for r in verdict.responsible]}")
    outside = [r.node for r in verdict.suspects if r.node not in JOB_NODES]
    if outside:
        problems.append(f"suspects outside the job={outside}")
    for name, text in (("summary", verdict.summary), ("action", verdict.action or "")):
        if DRAIN.search(text):
            problems.append(f"{name} says to drain: {text!r}")
        elif _named(text, output):
            problems.append(f"{name} names nodes outside the job: {text!r}")
    assert not problems, (
        f"{verdict.sub_domain.value} / {verdict.cause.id if verdict.cause else None}: "
        + "; ".join(problems)
    )


# ---- the line reader

GZIP_MAGIC, ZSTD_MAGIC = b"\x1f\x8b", b"\x28\xb5\x2f\xfd"
SKIPPABLE = struct.pack("<II", 0x184D2A50, 4) + b"pzst"  # a zstd skippable frame (pzstd)
BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE, codecs.BOM_UTF32_LE)
# coverage notes that count damage in lines that were read (not a reason a file was not read)
GENERIC_NOTES = {"nul_bytes", "long_lines", "odd_prefix", "uptime_only", "earlier_boot"}


@dataclass
class RawFile:
    """Bytes of one log file; ``plain``: read it as job output is (never decompressed);
    ``max_line``: the reader's line limit."""

    data: bytes
    plain: bool = False
    max_line: int = DEFAULT_MAX_LINE


def _chunk() -> st.SearchStrategy[bytes]:
    text = st.one_of(st.sampled_from(example_lines()), st.text(max_size=40)).map(
        lambda s: s.encode("utf-8", "surrogatepass")
    )
    return st.one_of(
        text,
        st.binary(max_size=64),
        st.sampled_from((b"\n", b"\r\n", b"\r", b"\n\r", b"\n\n\n", b"\r\r\n")),
        st.integers(1, 40).map(lambda n: b"\x00" * n),
        st.sampled_from((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82")),
        st.sampled_from((*BOMS, GZIP_MAGIC, ZSTD_MAGIC, SKIPPABLE)),
        st.tuples(st.sampled_from((b"A", b" ", b"\xff", b"\x00")), st.integers(100, 200_000)).map(
            lambda t: t[0] * t[1]
        ),
    )


@st.composite
def raw_files(draw: st.DrawFn) -> RawFile:
    """Random bytes from real lines and junk, as they are or compressed, damaged or not."""
    body = b"".join(draw(st.lists(_chunk(), max_size=12)))
    wrap = draw(
        st.sampled_from(
            ("none", "none", "gzip", "zstd", "gzip-cut", "zstd-cut", "gzip+junk", "zstd+junk")
        )
    )
    if wrap.startswith("gzip"):
        packed = gzip.compress(body, mtime=0)
    elif wrap.startswith("zstd"):
        packed = zstd.compress(body)
    else:
        packed = body
    if wrap.endswith("-cut") and len(packed) > 2:
        packed = packed[: draw(st.integers(2, len(packed) - 1))]
    if wrap.endswith("+junk"):
        packed += draw(st.binary(min_size=1, max_size=40))
    max_line = draw(st.sampled_from((16, 100, 4096, DEFAULT_MAX_LINE)))
    return RawFile(packed, draw(st.booleans()), max_line)


def reader_view(data: bytes, plain: bool) -> bytes | None:
    """The bytes the reader should read as text from a file of ``data``: the file itself, or
    its compression layers (at most two) undone and text in UTF-16 or UTF-32 transcoded; None
    when a compressed stream is damaged. Which encoding text is in comes from the reader's
    own ``text_encoding`` (its rules are tested on their own in test_hostile_sources.py)."""
    if plain:
        return data
    decoders: dict[str, Callable[[bytes], bytes]] = {
        "gzip": gzip.decompress,
        "zstd": zstd.decompress,
        "bzip2": bz2.decompress,
        "xz": lzma.decompress,
    }
    try:
        for _ in range(reader.MAX_LAYERS):
            kind = reader.compression(data[:4096])
            if kind not in decoders:
                break
            data = decoders[kind](data)
    except (OSError, EOFError, ValueError, zstd.ZstdError, lzma.LZMAError):
        return None
    encoding = reader.text_encoding(data[:4096])
    if encoding is not None:
        return data.decode(encoding, "replace").encode("utf-8", "surrogatepass")
    return data


def raw_lines(view: bytes) -> list[bytes]:
    """The lines of ``view`` as the reader splits them: a NUL run ends a line."""
    view = re.sub(rb"\x00+", lambda m: b" " * (len(m.group()) - 1) + b"\n", view)
    parts = view.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    return parts


def expected_lines(view: bytes, max_line: int) -> list[str]:
    """The non-blank lines the reader should give for ``view``: a NUL run ends a line, a line
    is cut at ``max_line`` bytes, invalid UTF-8 is replaced, the line ending removed."""
    out = []
    for part in raw_lines(view):
        text = part[:max_line].decode("utf-8", "replace").rstrip("\r\n")
        if text.strip():
            out.append(text)
    return out


def read_file(path: Path, raw: RawFile) -> tuple[list[str], Any]:
    if raw.plain:
        spec = SourceSpec(Stream.JOB_STDOUT, None, [path], nofollow=True, plain=True)
    else:
        spec = SourceSpec(Stream.KERNEL, "n1", [path])
    reader = SourceReader(spec, ReadContext(max_line=raw.max_line))
    lines = [x.raw for x in reader.lines()]
    return lines, reader.coverage()


def check_reader(raw: RawFile, ruleset: RuleSet | None = None) -> None:
    """No exception escapes the reader, and every byte is accounted for: read into the lines
    expected, or the file's coverage entry says what was not read."""
    with tempfile.TemporaryDirectory(prefix="attribution-fuzz-") as tmp:
        path = Path(tmp) / "kern.log"
        path.write_bytes(raw.data)
        lines, cov = _timed("reading", lambda: read_file(path, raw))
    codes = {n.code for n in cov.notes}
    view = reader_view(raw.data, raw.plain)
    if view is None:  # a damaged compressed stream: an error that says so
        assert cov.status is CoverageStatus.ERROR and "read_error" in codes, (cov.status, codes)
        return
    want = expected_lines(view, raw.max_line)
    assert lines == want, _first_difference(lines, want)
    assert cov.bytes == len(view), (cov.bytes, len(view))
    if any(len(x) > raw.max_line for x in raw_lines(view)):
        assert "long_lines" in codes, codes


def _first_difference(got: list[str], want: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"line {i}: read {a[:200]!r}, expected {b[:200]!r}"
    return f"read {len(got)} lines, expected {len(want)}"


@dataclass
class EncodedText:
    """Lines of text stored in an encoding or container the reader must read or report."""

    text: str
    how: str
    data: bytes


ENCODINGS: dict[str, Callable[[bytes], bytes]] = {
    "utf-16-bom": lambda b: codecs.BOM_UTF16_LE + b.decode().encode("utf-16-le"),
    "utf-16-le": lambda b: b.decode().encode("utf-16-le"),
    "utf-16-be": lambda b: b.decode().encode("utf-16-be"),
    "utf-32": lambda b: b.decode().encode("utf-32"),
    "gzip": lambda b: gzip.compress(b, mtime=0),
    "gzip-of-gzip": lambda b: gzip.compress(gzip.compress(b, mtime=0), mtime=0),
    "gzip-of-zstd": lambda b: gzip.compress(zstd.compress(b), mtime=0),
    "zstd-of-gzip": lambda b: zstd.compress(gzip.compress(b, mtime=0)),
    "zstd-skippable": lambda b: SKIPPABLE + zstd.compress(b),
}


@st.composite
def encoded_texts(draw: st.DrawFn, how: str | None = None) -> EncodedText:
    """Example lines in one of ``ENCODINGS`` (``how``, or any)."""
    lines = draw(st.lists(st.sampled_from(example_lines()), min_size=1, max_size=8))
    text = "".join(x + "\n" for x in lines)
    how = how or draw(st.sampled_from(sorted(ENCODINGS)))
    return EncodedText(text, how, ENCODINGS[how](text.encode()))


def check_no_silent_junk(enc: EncodedText, ruleset: RuleSet | None = None) -> None:
    """Text in another encoding or container is read as that text, or its coverage entry
    says it was not (never junk read with an ``ok``)."""
    with tempfile.TemporaryDirectory(prefix="attribution-fuzz-") as tmp:
        path = Path(tmp) / "kern.log"
        path.write_bytes(enc.data)
        lines, cov = _timed("reading", lambda: read_file(path, RawFile(enc.data)))
    want = [x for x in enc.text.split("\n") if x.strip()]
    if [x.lstrip("\ufeff") for x in lines] == want:
        return
    said = {n.code for n in cov.notes} - GENERIC_NOTES
    assert cov.status not in (CoverageStatus.OK, CoverageStatus.EMPTY) or said, (
        f"{enc.how}: read as {lines[:2]!r}..., coverage {cov.status.value} with notes"
        f" {sorted(n.code for n in cov.notes)}"
    )


# ---- job records

RECORD_KEYS = sorted(
    {
        "job_id", "JobID", "jobid", "cluster", "sluid", "array_job_id", "array_task_id",
        "restart_count", "Restarts", "name", "user", "uid", "UID", "account", "partition",
        "state", "State", "reason", "exit_code", "ExitCode", "derived_exit_code", "nodes",
        "NodeList", "start", "Start", "end", "End", "time_limit", "Timelimit", "work_dir",
        "std_out", "std_err", "admin_comment", "failed_node", "node_addresses", "boot_times",
        "timezone", "tz", "exclusive", "gres_detail", "gpu_bus_ids", "other_jobs",
        "fields_missing", "unknown_key",
    }
)  # fmt: skip
ODD_TEXT = (
    "", " ", "unknown", "(null)", "\ud800", "9" * 5000, "America", "Europe/Berlin", "x" * 300,
    "UTC", "Etc/GMT+14", "../../etc", "2026-13-45T99:00:00", "2026-01-01T10:00:00+25:00",
    "1767261600", "99999999999999999999", "-1", "1e400", "nan", "CANCELLED by 1001",
    "CANCELLED by", "FAILED+", "1:0", "255:255", "-1:-1", "4294967296:0", "UNLIMITED",
    "1-00:00:00", "99999999999999-00:00", "n[1-4]", "n[0-" + "9" * 5000 + "]",
    "gpu-a[01-04]", "n[1-3", "n[3-1]", "a,b,,c", "gpu:h100:2(IDX:0-1)", "0000:3b:00.0",
    "10.0.0.1", "2026-01-01T11:00:00Z",
)  # fmt: skip
HUGE_INT = "\x00a number of 5000 digits\x00"  # written as one by _dumps (repr cannot show it)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**30), 10**30),
    st.sampled_from((HUGE_INT, -(10**400))),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD_TEXT),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.one_of(st.sampled_from(JOB_NODES + ODD_TEXT[:8]), st.text(max_size=8)),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@st.composite
def job_records(draw: st.DrawFn) -> BundleCase:
    """A job record changed at random keys (or not an object at all), as JSON text."""
    if draw(st.integers(0, 9)) == 0:
        record: Any = draw(json_values)
    else:
        record = dict(JOB)
        for key in draw(st.lists(st.sampled_from(RECORD_KEYS), max_size=5)):
            if draw(st.integers(0, 5)) == 0:
                record.pop(key, None)
            else:
                record[key] = draw(json_values)
    text = _dumps(record)
    case = BundleCase({}, {"job/stderr.log": encode(list(TRACEBACK))}, raw_job=text)
    return case


def _dumps(value: Any) -> bytes:
    """JSON text of ``value``, ``HUGE_INT`` as a bare number of 5000 digits."""
    marker = json.dumps(HUGE_INT).encode()
    return json.dumps(value, ensure_ascii=True).encode().replace(marker, b"9" * 5000)


def check_record(case: BundleCase, ruleset: RuleSet) -> None:
    """A job record is read, or refused with a one-line ``BundleError``; a record that is read
    is diagnosed without any other exception."""
    with tempfile.TemporaryDirectory(prefix="attribution-fuzz-") as tmp:
        root = case.write(Path(tmp) / "b")
        try:
            _timed("reading the record", lambda: read_job(root / "job.json"))
            _timed("diagnosis", lambda: diagnose_bundle(root, ruleset, workers=1))
        except BundleError as exc:
            message = str(exc)
            assert "\n" not in message and len(message) < 2000, message[:300]


# ---------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Target:
    name: str
    strategy: st.SearchStrategy[Any]
    check: Callable[[Any, RuleSet], None]


TARGETS = (
    Target("reader", raw_files(), check_reader),
    Target("encodings", encoded_texts(), check_no_silent_junk),
    Target("diagnosis", diagnosis_bundles(), check_diagnosis),
    Target("blame", forged_bundles(), check_blame),
    Target("records", job_records(), check_record),
)
