"""Real systemd journal files as evidence: made by systemd-journal-remote from export format,
read with journalctl. The kernel transport is trusted kernel evidence; a user's
``logger -t kernel`` line is syslog, untrusted, and shown as forged when the kernel's own
record was running and lacks it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from attribution.bundle import diagnose_bundle
from attribution.model import CoverageNote, Stream, SubDomain
from attribution.rules.compiled import RuleSet
from attribution.sources.journal import JournalReader, journal_specs
from attribution.sources.specs import ReadContext

REMOTE = next(
    (
        p
        for p in ("/lib/systemd/systemd-journal-remote", "/usr/lib/systemd/systemd-journal-remote")
        if Path(p).exists()
    ),
    None,
)
MISSING = REMOTE is None or shutil.which("journalctl") is None
WHY = (
    "systemd-journal-remote and journalctl are needed to make and read real journal files"
    " (Debian packages systemd-journal-remote and systemd; .ci/run installs them)"
)
if MISSING and os.environ.get("ATTRIBUTION_REQUIRE_JOURNAL") == "1":
    raise RuntimeError(f"ATTRIBUTION_REQUIRE_JOURNAL=1 but {WHY}")
pytestmark = pytest.mark.skipif(MISSING, reason=WHY)

T0 = datetime(2026, 6, 10, 10, 0, tzinfo=UTC)
BOOT = "e2d40f3a289e423cb5a3ea556f4a9f2c"
XID = "NVRM: Xid (PCI:0000:18:00): 79, pid=61001, name=python, GPU has fallen off the bus."


def entry(at: datetime, message: str, **fields: str) -> dict[str, str]:
    usec = int(at.timestamp() * 1_000_000)
    return {
        "__REALTIME_TIMESTAMP": str(usec),
        "__MONOTONIC_TIMESTAMP": str(usec - int(T0.timestamp() * 1_000_000) + 3_600_000_000),
        "_BOOT_ID": BOOT,
        "_HOSTNAME": "gpu012",
        "MESSAGE": message,
        **fields,
    }


def kernel(at: datetime, message: str) -> dict[str, str]:
    return entry(at, message, _TRANSPORT="kernel", SYSLOG_IDENTIFIER="kernel", PRIORITY="3")


def logger(at: datetime, message: str, ident: str, uid: str) -> dict[str, str]:
    return entry(at, message, _TRANSPORT="syslog", SYSLOG_IDENTIFIER=ident, _UID=uid, _PID="7001")


def make_journal(path: Path, entries: list[dict[str, str]]) -> Path:
    """A real journal file, written by systemd-journal-remote from export format."""
    export = path.with_suffix(".export")
    ordered = sorted(entries, key=lambda e: int(e["__REALTIME_TIMESTAMP"]))  # written as it came
    export.write_text("".join("".join(f"{k}={v}\n" for k, v in e.items()) + "\n" for e in ordered))
    assert REMOTE is not None
    subprocess.run(
        [REMOTE, f"--output={path}", str(export)], check=True, capture_output=True, timeout=60
    )
    export.unlink()
    return path


def background() -> list[dict[str, str]]:
    """Entries an hour before and after the job: the journal was recording all along."""
    return [
        entry(T0 - timedelta(hours=1), "Started session-21.scope.", _TRANSPORT="journal", _UID="0"),
        kernel(T0 - timedelta(minutes=50), "audit: type=1400 audit(1781081998.117:3112): apparmor"),
        entry(
            T0 + timedelta(hours=1), "Finished logrotate.service.", _TRANSPORT="journal", _UID="0"
        ),
    ]


def read(path: Path, stream: Stream) -> tuple[list, list]:  # type: ignore[type-arg]
    spec = next(s for s in journal_specs([path], "gpu012") if s.stream is stream)
    ctx = ReadContext(window=(T0 - timedelta(minutes=5), T0 + timedelta(minutes=30)))
    reader = JournalReader(spec, ctx)
    lines = list(reader.lines())
    return lines, reader.coverages()


def test_the_kernel_transport_is_trusted_and_a_users_logger_line_is_not(tmp_path: Path) -> None:
    journal = make_journal(
        tmp_path / "remote-gpu012.journal",
        [
            *background(),
            kernel(T0 + timedelta(minutes=6), XID),
            logger(T0 + timedelta(minutes=7), XID, "kernel", uid="1001"),
            logger(
                T0 + timedelta(minutes=8),
                "nvidia-fabricmanager.service: Failed with result 'exit-code'.",
                "systemd",
                uid="0",
            ),
        ],
    )
    klines, kcov = read(journal, Stream.KERNEL)
    texts = [line.text for line in klines]
    assert XID in texts and all(line.trusted and line.ident == "kernel" for line in klines)
    assert klines[texts.index(XID)].time == T0 + timedelta(minutes=6)
    (cov,) = kcov
    assert cov.status.value == "ok" and cov.trust is not None and cov.trust.value == "trusted"
    # recording from before the window to after it, from entries of any kind
    assert cov.first_at is not None and cov.first_at <= T0 - timedelta(minutes=50)
    assert cov.last_at == T0 + timedelta(hours=1)

    slines, scov = read(journal, Stream.SYSLOG)
    forged = [line for line in slines if line.text == XID]
    assert len(forged) == 1 and forged[0].ident == "kernel" and forged[0].trusted is False
    root = [line for line in slines if "fabricmanager" in line.text]
    assert root and root[0].trusted is True and root[0].ident == "systemd"
    assert scov[0].trust is not None and scov[0].trust.value == "untrusted"


def bundle(tmp_path: Path, entries: list[dict[str, str]], output: str, name: str) -> Path:
    root = tmp_path / name
    (root / "job").mkdir(parents=True)
    (root / "nodes" / "gpu012").mkdir(parents=True)
    make_journal(root / "nodes" / "gpu012" / "remote-gpu012.journal", entries)
    (root / "job" / "stdout.log").write_text(output)
    (root / "job.json").write_text(
        json.dumps(
            {
                "job_id": "777",
                "state": "FAILED",
                "exit_code": "1:0",
                "nodes": "gpu012",
                "start": T0.isoformat(),
                "end": (T0 + timedelta(minutes=20)).isoformat(),
                "user": "carol",
                "uid": 1003,
                "exclusive": False,
                "gres_detail": {"gpu012": "gpu:h100:1(IDX:0)"},
                "gpu_bus_ids": {"gpu012": ["0000:18:00.0", "0000:2a:00.0"]},
                "other_jobs": {"gpu012": [{"job_id": "778", "start": T0.isoformat()}]},
            }
        )
    )
    return root


KEYERROR = (
    "[2026-06-10 10:12:00,101] [INFO] step 400 loss 2.300\n"
    "Traceback (most recent call last):\n"
    '  File "/home/carol/train.py", line 88, in <module>\n'
    "    batch = tokenizer(sample)['input_ids']\n"
    "KeyError: 'input_ids'\n"
)


def test_a_forged_kernel_line_in_the_journal_is_shown_as_forged(
    tmp_path: Path, ruleset: RuleSet
) -> None:
    forged = bundle(
        tmp_path,
        [*background(), logger(T0 + timedelta(minutes=6), XID, "kernel", uid="1004")],
        KEYERROR,
        "forged",
    )
    _, verdict = diagnose_bundle(forged, ruleset)
    assert verdict.sub_domain is SubDomain.APPLICATION and verdict.responsible == ()
    assert verdict.cause is not None and verdict.cause.id == "python-error"
    xid = [e for e in verdict.symptom_chain if e.event == "gpu.xid"]
    assert xid and xid[0].role.value == "context" and xid[0].trust == "untrusted"
    assert xid[0].note and xid[0].note.startswith("forged")

    real = bundle(
        tmp_path,
        [*background(), kernel(T0 + timedelta(minutes=6), XID)],
        "[rank0]: RuntimeError: CUDA error: unspecified launch failure\n",
        "real",
    )
    _, verdict = diagnose_bundle(real, ruleset)
    assert verdict.sub_domain is SubDomain.HARDWARE
    assert [(r.node, r.confirmed_by) for r in verdict.responsible] == [("gpu012", "kernel")]


def test_a_saved_journalctl_export_reads_the_same(tmp_path: Path, ruleset: RuleSet) -> None:
    """``sattr bundle`` saves a journal's window as ``journalctl -o json`` lines (*.jsonl):
    the transport and uid survive, so the trust does too."""
    entries = [*background(), logger(T0 + timedelta(minutes=6), XID, "kernel", uid="1004")]
    root = bundle(tmp_path, entries, KEYERROR, "exported")
    journal = root / "nodes" / "gpu012" / "remote-gpu012.journal"
    out = subprocess.run(
        ["journalctl", f"--file={journal}", "-o", "json", "--no-pager", "-q"],
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout
    journal.unlink()
    (journal.parent / "journal.jsonl").write_bytes(out)
    _, verdict = diagnose_bundle(root, ruleset)
    assert verdict.sub_domain is SubDomain.APPLICATION and verdict.responsible == ()
    xid = [e for e in verdict.symptom_chain if e.event == "gpu.xid"]
    assert xid and xid[0].note and xid[0].note.startswith("forged")


def test_a_kernel_message_over_4096_bytes_is_read_not_null(tmp_path: Path) -> None:
    """journalctl -o json prints a field over 4096 bytes as null unless --all is given."""
    long = XID + " " + "x" * 6000
    journal = make_journal(
        tmp_path / "remote-gpu012.journal", [*background(), kernel(T0 + timedelta(minutes=6), long)]
    )
    lines, _ = read(journal, Stream.KERNEL)
    assert any(line.text.startswith(XID) for line in lines)


def test_journal_files_and_saved_exports_side_by_side_are_both_read(tmp_path: Path) -> None:
    """A node directory holding a journal file and a *.jsonl export (with a damaged line)."""
    journal = make_journal(tmp_path / "system.journal", background())
    export = tmp_path / "journal.jsonl"
    rows = [
        json.dumps(kernel(T0 + timedelta(minutes=6), XID)),
        "[" * 50_000 + "]" * 50_000,  # nested too deeply for the JSON parser
        json.dumps({**kernel(T0 + timedelta(minutes=7), "audit: x"), "_PID": "9" * 5000}),
    ]
    export.write_text("\n".join(rows) + "\n")
    spec = next(s for s in journal_specs([journal, export], "gpu012") if s.stream is Stream.KERNEL)
    ctx = ReadContext(window=(T0 - timedelta(minutes=5), T0 + timedelta(minutes=30)))
    reader = JournalReader(spec, ctx)
    texts = [line.text for line in reader.lines()]
    assert XID in texts and "audit: x" in texts
    (cov,) = reader.coverages()
    assert cov.status.value == "ok", cov
    assert CoverageNote("not_journal_entry", {"file": "journal.jsonl", "line": 2}) in cov.notes
    # the binary file's recording span counts too (its entries an hour either side)
    assert cov.first_at is not None and cov.first_at <= T0 - timedelta(minutes=50)
