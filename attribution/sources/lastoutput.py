"""When each job output file last said something: the ``OutputSilence`` observation.

The reader calls ``wants_last_output``, feeds a ``Tail`` with every block and asks
``last_output`` at the end of each file; the observation goes to ``analyze`` as a value (it is
not a log line, so nothing a job prints can forge it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from attribution.model import OutputSilence, Stream
from attribution.sources.prefix import parse_prefix
from attribution.sources.reader import decode_line
from attribution.sources.specs import EveryLine, LineSelector, ReadContext, SourceSpec

# When a job output file's last timed line was written. A job that stopped writing long before
# Slurm killed it at its time limit was hung, not slow (CHAINS.md 11). Lines in the last
# TEARDOWN seconds (SIGTERM handlers) do not count; only the last TAIL_BYTES of a file are
# searched.
TEARDOWN = 120.0
TAIL_BYTES = 256 << 10
CADENCE = 5  # timed lines before the last one that show the output was stamped regularly


@dataclass(slots=True)
class Tail:
    """The last ``TAIL_BYTES`` (or more: whole blocks) of a file, to find its last timed line."""

    # data, number of its first line (0: unknown), its byte offset, whether its first line is cut
    blocks: list[tuple[bytes, int, int, bool]] = field(default_factory=list)
    size: int = 0

    def push(self, block: bytes, lineno: int, offset: int, newlines: int) -> None:
        """Keep ``block`` (its first line is ``lineno``, 0 if unknown; it holds ``newlines``
        newlines, already counted by the reader) as far as the tail needs it."""
        cut = max(0, len(block) - TAIL_BYTES)
        if cut:
            kept = block[cut:]
            lineno = lineno + newlines - kept.count(b"\n") if lineno else 0
            self.blocks.append((kept, lineno, offset + cut, True))
        else:
            self.blocks.append((block, lineno, offset, False))
        self.size += len(block) - cut
        while len(self.blocks) > 1 and self.size - len(self.blocks[0][0]) >= TAIL_BYTES:
            self.size -= len(self.blocks.pop(0)[0])

    def last_time_before(
        self, cutoff: datetime, ctx: ReadContext, selector: LineSelector
    ) -> tuple[datetime, int, int, int, int, int] | None:
        """(time, line number or 0, byte offset, untimed lines after it, their bytes, timed
        lines before it) for the last line stamped before ``cutoff`` (or, when one of the
        ``CADENCE`` timed lines before it carries a later time, that one). Untimed lines after it
        count only when no extractor's literal picks them: those are ordinary output (untimed
        progress), not the error and teardown messages a killed job prints. Timed lines before
        it are counted up to ``CADENCE`` (enough to show the output was stamped regularly)."""
        untimed = untimed_bytes = 0
        found: tuple[datetime, int, int] | None = None
        timed_before = 0
        for data, lineno, offset, cut in reversed(self.blocks):
            lines = data.split(b"\n")
            starts = [0]
            for chunk in lines[:-1]:
                starts.append(starts[-1] + len(chunk) + 1)
            picked = set(selector.line_starts(data))
            for index in range(len(lines) - 1, 0 if cut else -1, -1):  # a cut line is no line
                raw = decode_line(lines[index])
                if not raw.strip():
                    continue
                try:
                    when = parse_prefix(raw, tz=ctx.tz, reference=ctx.reference).time
                except Exception:
                    when = None
                if found is not None:
                    timed_before += when is not None
                    if when is not None and found[0] < when < cutoff:
                        # a line stamped earlier than the one before it (a replayed log, a
                        # node whose clock is behind): the output went on until this time
                        line = lineno + index if lineno else 0
                        found = (when, line, offset + starts[index])
                    if timed_before >= CADENCE:
                        break
                elif when is None:
                    if starts[index] not in picked:
                        untimed += 1
                        untimed_bytes += len(lines[index])
                elif when < cutoff:
                    line = lineno + index if lineno else 0
                    found = (when, line, offset + starts[index])
            if found is not None and timed_before >= CADENCE:
                break
        if found is None:
            return None
        return (*found, untimed, untimed_bytes, timed_before)


def wants_last_output(spec: SourceSpec, ctx: ReadContext) -> bool:
    return ctx.job_span is not None and spec.stream in (
        Stream.JOB_STDOUT,
        Stream.JOB_STDERR,
    )


def last_output(tail: Tail, shown: str, spec: SourceSpec, ctx: ReadContext) -> OutputSilence | None:
    """When one job output file last said something, or None when the file's tail holds no
    timed line before the job's teardown."""
    assert ctx.job_span is not None
    start, end = ctx.job_span
    cutoff = end - timedelta(seconds=TEARDOWN)
    selector = ctx.notable.get(spec.stream) or ctx.selectors.get(spec.stream) or EveryLine()
    found = tail.last_time_before(cutoff, ctx, selector)
    if found is None:
        return None
    when, lineno, offset, untimed, untimed_bytes, timed_before = found
    silent = (end - when).total_seconds()
    return OutputSilence(
        stream=spec.stream,
        node=spec.node,
        file=shown,
        line=lineno,
        offset=None if lineno else offset,
        at=when,
        silent_s=silent,
        share=silent / max(1.0, (end - start).total_seconds()),
        untimed_after=untimed,
        untimed_bytes=untimed_bytes,
        timed_before=timed_before,
    )
