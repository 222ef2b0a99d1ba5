"""Rendering the lines a run collected into the text of each node file, in that node's own
log format (kernel, syslog, Fabric Manager)."""

from __future__ import annotations

from attribution.sim.formats import LineFormat, format_line
from attribution.sim.state import BOOT_MARK, Node, Sim


def render_kernel(sim: Sim, node: Node) -> list[str]:
    fmt = node.kfmt
    ring = fmt in ("raw", "dmesg_t")  # a ring-buffer dump only holds the current boot
    boots = sorted({*node.reboots, node.boot})
    out: list[str] = []
    for t, _seq, msg in sorted(node.kernel_lines):
        if ring and t < node.boot - 1e-6:
            continue
        if msg == BOOT_MARK:
            out.append(f"-- Boot {sim.rng.getrandbits(128):032x} --")
            continue
        boot = max((b for b in boots if b <= t + 1e-6), default=node.boot)
        out.append(
            format_line(
                fmt,  # type: ignore[arg-type]
                sim.local(t, node),
                msg,
                host=node.host_in_log,
                uptime=max(0.0, t - boot),
            )
        )
    return out


def render_syslog(sim: Sim, node: Node) -> list[str]:
    kind: LineFormat = node.kfmt if node.kfmt in ("iso", "short_iso") else "syslog_short"  # type: ignore[assignment]
    out: list[str] = []
    for t, _seq, msg in sorted(node.syslog_lines):
        ident, _, text = msg.partition(": ")
        out.append(format_line(kind, sim.local(t, node), text, host=node.host_in_log, ident=ident))
    return out


def render_fm(sim: Sim, node: Node) -> list[str]:
    return [
        format_line("fabricmanager", sim.local(t, node), msg)
        for t, _s, msg in sorted(node.fm_lines)
    ]


def join_lines(lines: list[str]) -> str:
    return "\n".join(lines) + "\n" if lines else ""
