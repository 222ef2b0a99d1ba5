"""MUNGE credentials (the service Slurm authenticates with): how ``sattr`` proves to
``sattr serve`` who runs it, and how the server learns the uid.

The client runs ``munge`` with a payload naming the request (``sattr:GET /api/v1/jobs/42``);
the server runs ``unmunge`` on the credential, which munged answers with the uid and gid of
the process that asked for it, and checks the payload against the request it came with.
munged refuses a credential decoded twice (``Replayed credential``) or past its time to live
(300 s by default), so a credential seen in transit cannot be used for another request.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from attribution.errors import AttributionError

MAX_CREDENTIAL = 16 * 1024  # a MUNGE credential is a few hundred bytes of base64
PREFIX = "sattr:"

# munge's error codes (munge.h, enum munge_err) that say something about the credential
_STATUS = {
    6: "munged is not running or its socket is not reachable",
    8: "the credential is not valid base64 MUNGE text",
    9: "the credential was encoded with another key (another cluster?)",
    10: "the credential is corrupt",
    15: "the credential has expired (clocks apart, or older than its time to live)",
    16: "the credential is dated in the future (clock skew)",
    17: "the credential was already used (replayed)",
    18: "the credential was not meant for this server",
}


class MungeError(AttributionError):
    """A MUNGE credential could not be made or was refused; the message says why."""


@dataclass(frozen=True, slots=True)
class Credential:
    """A decoded credential: who asked for it and the payload they put in."""

    uid: int
    gid: int
    payload: str
    encode_host: str


# a fixed PATH and locale, like every process this package starts (docs/architecture.md)
_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def _command(name: str, socket: Path | None) -> list[str]:
    return [name, *(["--socket", str(socket)] if socket else [])]


def encode(payload: str, *, socket: Path | None = None, timeout: float = 10.0) -> str:
    """A credential for ``payload`` from the local munged.

    Raises:
        MungeError: when ``munge`` is not installed, munged does not answer, or it fails.
    """
    try:
        done = subprocess.run(
            [*_command("munge", socket), "--string", payload],
            capture_output=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            env=_ENV,
        )
    except FileNotFoundError:
        raise MungeError("the 'munge' command is not installed on this node") from None
    except subprocess.TimeoutExpired:
        raise MungeError(f"munge did not answer within {timeout:g} s") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise MungeError(f"munge failed: {why[-1] if why else f'exit {done.returncode}'}")
    return done.stdout.decode("ascii", "replace").strip()


def decode(credential: str, *, socket: Path | None = None, timeout: float = 10.0) -> Credential:
    """Ask munged who made ``credential`` (once: munged refuses it the second time).

    Raises:
        MungeError: when the credential is refused, or ``unmunge`` cannot be run.
    """
    text = credential.strip()
    if not text or len(text) > MAX_CREDENTIAL or not text.isascii():
        raise MungeError("the credential is empty, too long or not ASCII")
    try:
        done = subprocess.run(
            [*_command("unmunge", socket), "--numeric"],
            input=text.encode("ascii"),
            capture_output=True,
            timeout=timeout,
            check=False,
            env=_ENV,
        )
    except FileNotFoundError:
        raise MungeError("the 'unmunge' command is not installed on the server") from None
    except subprocess.TimeoutExpired:
        raise MungeError(f"unmunge did not answer within {timeout:g} s") from None
    head, _, payload = done.stdout.partition(b"\n\n")
    meta: dict[str, str] = {}
    for line in head.decode("ascii", "replace").splitlines():
        key, sep, value = line.partition(":")
        if sep:
            meta[key.strip()] = value.strip()
    status = meta.get("STATUS", str(done.returncode))
    if done.returncode != 0 or status != "0":
        code = int(status) if status.isdecimal() else done.returncode
        why = _STATUS.get(code)
        if why is None:
            lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
            why = lines[-1] if lines else f"unmunge exit {done.returncode}"
        raise MungeError(f"MUNGE credential refused: {why}")
    try:
        return Credential(
            uid=int(meta["UID"]),
            gid=int(meta["GID"]),
            payload=payload.decode("utf-8", "replace"),
            encode_host=meta.get("ENCODE_HOST", ""),
        )
    except (KeyError, ValueError):
        raise MungeError("unmunge gave no numeric UID and GID") from None


def request_payload(method: str, path: str) -> str:
    """The payload a client puts in the credential for one request (path with its query)."""
    return f"{PREFIX}{method.upper()} {path}"


__all__ = ["Credential", "MungeError", "decode", "encode", "request_payload"]
