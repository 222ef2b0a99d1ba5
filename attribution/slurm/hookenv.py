"""Read the spool entries written by ``slurm/epilog-slurmctld`` (standard library only).

An entry is one header line followed by the output of the shell builtin
``export -p``::

    # attribution-spool 1 key=testcluster_42_0 pid=1234 epoch=
    export SLURM_JOB_ID='42'
    export SLURM_JOB_NAME='it'"'"'s a job'

Different ``/bin/sh`` implementations quote differently: dash and busybox use
single quotes (``'"'"'`` for a quote inside), bash uses ``declare -x`` or
``export`` with double quotes and ``$'...'`` for control characters, and a
value may span several lines. ``parse_export_p`` reads all of these as text,
following the POSIX shell quoting rules; nothing is ever sourced or evaluated.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from attribution.errors import Location, SpoolError

ENTRY_MAGIC = "# attribution-spool 1"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEY_BYTE = re.compile(r"[A-Za-z0-9._-]")
_C_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}


@dataclass(slots=True)
class HookEntry:
    """One parsed spool entry.

    ``env`` holds the ``SLURM_*`` variables exactly as slurmctld set them;
    ``header`` the ``key=value`` words of the first line; ``spooled_at`` the
    time the hook ran (epoch seconds, UTC), from the header or the file mtime.
    """

    key: str
    env: dict[str, str]
    header: dict[str, str] = field(default_factory=dict)
    spooled_at: float | None = None


def sanitize_key(raw: str) -> str:
    """Make a spool key safe as a file name, exactly as the hook does.

    Bytes outside ``[A-Za-z0-9._-]`` become ``_`` (a two-byte UTF-8 character
    gives two); a leading dot gets a ``_`` in front. ``"../x"`` -> ``"_.._x"``.
    """
    # byte by byte, as the hook's shell loop sees a multi-byte character
    data = raw.encode("utf-8", errors="surrogateescape")
    out = "".join(chr(b) if _KEY_BYTE.match(chr(b)) else "_" for b in data)
    return "_" + out if out.startswith(".") else out


def key_from_env(env: Mapping[str, str]) -> str:
    """The spool key the hook builds from an EpilogSlurmctld environment.

    ``SLURM_JOB_SLUID`` (Slurm 25.11+) when set, else
    ``<cluster>_<jobid>_<restart>`` or, for an array task,
    ``<cluster>_<array job>_<task>_<restart>`` (REPORT A2/B7).

    Raises:
        SpoolError: when ``SLURM_JOB_ID`` is missing.
    """
    if env.get("SLURM_JOB_SLUID"):
        return sanitize_key(env["SLURM_JOB_SLUID"])
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        raise SpoolError("entry has no SLURM_JOB_ID")
    cluster = env.get("SLURM_CLUSTER_NAME") or "cluster"
    restart = env.get("SLURM_JOB_RESTART_COUNT") or "0"
    array, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return sanitize_key(f"{cluster}_{array}_{task}_{restart}")
    return sanitize_key(f"{cluster}_{job_id}_{restart}")


class _Scanner:
    """A cursor over the text with the few reads the shell grammar needs."""

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.pos = 0
        self.source = source

    def error(self, message: str, at: int | None = None) -> SpoolError:
        line = self.text.count("\n", 0, self.pos if at is None else at) + 1
        return SpoolError(message, Location(self.source, line))

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.text[i] if i < len(self.text) else ""

    def skip_blanks(self) -> None:
        while self.peek() in (" ", "\t"):
            self.pos += 1

    def skip_line(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end + 1

    def word(self) -> str | None:
        """Read one shell word (quotes removed); ``None`` at end of line or text."""
        self.skip_blanks()
        if self.peek() in ("", "\n"):
            return None
        out: list[str] = []
        while True:
            ch = self.peek()
            if ch in ("", " ", "\t", "\n"):
                return "".join(out)
            if ch == "'":
                out.append(self._single())
            elif ch == '"':
                out.append(self._double())
            elif ch == "$" and self.peek(1) == "'":
                self.pos += 1
                out.append(self._ansi_c())
            elif ch == "\\":
                nxt = self.peek(1)
                self.pos += 2
                if nxt != "\n":
                    out.append(nxt)
            else:
                out.append(ch)
                self.pos += 1

    def _single(self) -> str:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise self.error("unterminated single quote", self.pos)
        value = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return value

    def _double(self) -> str:
        start = self.pos
        self.pos += 1
        out: list[str] = []
        while True:
            ch = self.peek()
            if ch == "":
                raise self.error("unterminated double quote", start)
            if ch == '"':
                self.pos += 1
                return "".join(out)
            if ch == "\\" and self.peek(1) in ('"', "\\", "$", "`", "\n"):
                if self.peek(1) != "\n":
                    out.append(self.peek(1))
                self.pos += 2
                continue
            out.append(ch)
            self.pos += 1

    def _ansi_c(self) -> str:
        # bash writes non-ASCII bytes as octal escapes (\303\274 for "ü" in the C
        # locale), so the value is built as bytes and decoded as UTF-8 at the end.
        start = self.pos - 1
        self.pos += 1  # the opening quote
        out = bytearray()
        while True:
            ch = self.peek()
            if ch == "":
                raise self.error("unterminated $'...' quote", start)
            if ch == "'":
                self.pos += 1
                return out.decode("utf-8", errors="replace")
            if ch != "\\":
                out += ch.encode("utf-8")
                self.pos += 1
                continue
            out += self._ansi_escape()

    def _ansi_escape(self) -> bytes:
        esc = self.peek(1)
        self.pos += 2
        if esc in _C_ESCAPES:
            return _C_ESCAPES[esc].encode()
        if esc and esc in "01234567":
            digits = esc + self._take("01234567", 2)
            return bytes([int(digits, 8) & 0xFF])
        if esc == "x":
            digits = self._take("0123456789abcdefABCDEF", 2)
            return bytes([int(digits, 16)]) if digits else b"\\x"
        if esc in ("u", "U"):
            digits = self._take("0123456789abcdefABCDEF", 4 if esc == "u" else 8)
            try:
                return chr(int(digits, 16)).encode("utf-8") if digits else b"\\" + esc.encode()
            except (ValueError, OverflowError):
                return "\ufffd".encode()
        if esc == "c":
            ctl = self.peek()
            self.pos += 1
            return bytes([ord(ctl) & 0x1F]) if ctl else b""
        return ("\\" + esc).encode("utf-8")

    def _take(self, allowed: str, limit: int) -> str:
        start = self.pos
        while self.pos - start < limit and self.peek() and self.peek() in allowed:
            self.pos += 1
        return self.text[start : self.pos]


def iter_export_p(text: str, source: str = "<entry>") -> Iterator[tuple[str, str | None]]:
    """Yield ``(name, value)`` for every variable in ``export -p`` / ``declare -x`` output.

    ``value`` is ``None`` for a variable that is exported but unset. Comment
    lines (``#``) and blank lines are skipped.

    Raises:
        SpoolError: on an unterminated quote or a line that is not an export
            statement, with the line number.
    """
    scan = _Scanner(text, source)
    while scan.pos < len(scan.text):
        scan.skip_blanks()
        if scan.peek() in ("\n", "#"):
            scan.skip_line()
            continue
        if scan.peek() == "":
            return
        command = scan.word()
        if command not in ("export", "declare", "typeset", "readonly"):
            raise scan.error(f"not an export statement: {command!r}")
        while True:
            word = scan.word()
            if word is None:
                break
            if word.startswith("-") or word == "--":
                continue
            name, eq, value = word.partition("=")
            if not _NAME.match(name):
                raise scan.error(f"invalid variable name {name!r}")
            yield name, (value if eq else None)
        scan.skip_line()


def parse_export_p(text: str, source: str = "<entry>") -> dict[str, str]:
    """The set variables of ``export -p`` output as a dict (see ``iter_export_p``)."""
    return {name: value for name, value in iter_export_p(text, source) if value is not None}


def parse_entry(text: str, *, source: str = "<entry>", mtime: float | None = None) -> HookEntry:
    """Parse a whole spool entry: the header line, then ``export -p`` output.

    Only ``SLURM_*`` variables are kept. ``mtime`` (the file's) is the
    fallback for the spool time when the shell had no ``EPOCHSECONDS``.

    Raises:
        SpoolError: when the header is missing, the body cannot be parsed or
            there is no ``SLURM_JOB_ID``.
    """
    first, _, _ = text.partition("\n")
    if not first.startswith(ENTRY_MAGIC):
        raise SpoolError("not an attribution spool entry (bad header)", Location(source, 1))
    header = dict(w.split("=", 1) for w in first[len(ENTRY_MAGIC) :].split() if "=" in w)
    env = {k: v for k, v in parse_export_p(text, source).items() if k.startswith("SLURM_")}
    if not env.get("SLURM_JOB_ID"):
        raise SpoolError("entry has no SLURM_JOB_ID", Location(source))
    epoch = header.get("epoch", "")
    spooled_at = float(epoch) if epoch.isdecimal() else mtime
    return HookEntry(key=key_from_env(env), env=env, header=header, spooled_at=spooled_at)


def format_entry(env: Mapping[str, str], *, epoch: int | None = None) -> str:
    """Write an entry in the hook's format (dash-style quoting); used by ``sattr enqueue``."""
    key = key_from_env(env)
    lines = [f"{ENTRY_MAGIC} key={key} pid=0 epoch={'' if epoch is None else epoch}"]
    for name in sorted(env):
        if not _NAME.match(name):
            raise SpoolError(f"invalid variable name {name!r}")
        value = env[name].replace("'", "'\"'\"'")
        lines.append(f"export {name}='{value}'")
    return "\n".join(lines) + "\n"


__all__ = [
    "ENTRY_MAGIC",
    "HookEntry",
    "format_entry",
    "iter_export_p",
    "key_from_env",
    "parse_entry",
    "parse_export_p",
    "sanitize_key",
]
