"""Reading many sources as one stream of lines, source by source, optionally with a few
sources read ahead in threads (``read_sources``)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol

from attribution.model import Coverage, CoverageNote, LogLine, OutputSilence
from attribution.sources.journal import JournalReader
from attribution.sources.metrics import MetricsReader
from attribution.sources.specs import ReadContext, SourceSpec
from attribution.sources.textlog import SourceReader


class Reader(Protocol):
    """What ``read_sources`` gives for each source: its lines, then its coverage and
    (for job output) its ``OutputSilence`` observations."""

    spec: SourceSpec
    errors: list[CoverageNote]
    silences: list[OutputSilence]  # when each job output file last said something

    def lines(self) -> Iterator[LogLine]: ...

    def coverages(self) -> list[Coverage]: ...


def reader_for(spec: SourceSpec, ctx: ReadContext) -> Reader:
    """A ``SourceReader`` for files, a ``journal.JournalReader`` for journal files, a
    ``metrics.MetricsReader`` for metrics files."""
    if spec.kind == "journal":
        return JournalReader(spec, ctx)
    if spec.kind == "metrics":
        return MetricsReader(spec, ctx)
    return SourceReader(spec, ctx)


def read_sources(
    specs: Sequence[SourceSpec], ctx: ReadContext, *, workers: int = 1, queue_lines: int = 4096
) -> tuple[list[Reader], Iterator[LogLine]]:
    """Readers for ``specs`` and one iterator over all their lines, source by source.

    With ``workers`` > 1, up to that many sources are read ahead in threads
    (file reads and the pre-filter release the GIL, which pays off on slow or
    network file systems). Lines still come out in ``specs`` order, so the
    result is the same as reading one source after another; each read-ahead
    source buffers at most ``queue_lines`` lines (bounded memory).
    """
    readers = [reader_for(spec, ctx) for spec in specs]
    if workers <= 1 or len(readers) <= 1:

        def chain() -> Iterator[LogLine]:
            for reader in readers:
                yield from _in_place(reader)

        return readers, chain()
    return readers, _read_ahead(readers, workers, queue_lines)


def _in_place(reader: Reader) -> Iterator[LogLine]:
    try:
        yield from reader.lines()
    except Exception as exc:  # a reader must never take the whole read down
        reader.errors.append(CoverageNote("reader_failed", {"error": str(exc)}))


_DONE = object()
_BATCH = 256  # lines handed over at once: a queue operation per line cost ~10 µs of locking


def _read_ahead(readers: list[Reader], workers: int, queue_lines: int) -> Iterator[LogLine]:
    """Yield every reader's lines in order while up to ``workers`` readers run ahead."""
    # a queue is made when its source is submitted, and dropped once read: a job of 12,500
    # nodes has 37,500 sources, and a queue per source up front cost seconds and memory
    queues: dict[int, queue.Queue[object]] = {}
    stop = threading.Event()

    def produce(index: int) -> None:
        out = queues[index]

        def put(batch: list[LogLine]) -> bool:
            while not stop.is_set():
                try:
                    out.put(batch, timeout=0.2)
                    return True
                except queue.Full:
                    continue
            return False

        try:
            batch: list[LogLine] = []
            for line in readers[index].lines():
                batch.append(line)
                if len(batch) >= _BATCH:
                    if not put(batch):
                        return
                    batch = []
            if batch and not put(batch):
                return
        except Exception as exc:  # a reader must never take the whole read down
            readers[index].errors.append(CoverageNote("reader_failed", {"error": str(exc)}))
            if batch:  # the lines read before the failure
                put(batch)
        finally:
            with contextlib.suppress(queue.Full):
                out.put(_DONE, timeout=1.0 if stop.is_set() else None)

    def submit(index: int) -> concurrent.futures.Future[None]:
        queues[index] = queue.Queue(maxsize=max(1, queue_lines // _BATCH))
        return pool.submit(produce, index)

    # sources without a file (a missing log: 600,000 of them in a job of 200,000 nodes) have
    # nothing to read ahead and are read in place: a thread and a queue each cost more
    ahead = [i for i, reader in enumerate(readers) if reader.spec.paths]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {i: submit(i) for i in ahead[:workers]}
        position = 0  # of the next read-ahead source in ``ahead``
        try:
            for index in range(len(readers)):
                if index not in futures:
                    yield from _in_place(readers[index])
                    continue
                nxt = position + workers
                if nxt < len(ahead):
                    futures[ahead[nxt]] = submit(ahead[nxt])
                position += 1
                while True:
                    item = queues[index].get()
                    if item is _DONE:
                        break
                    yield from item  # type: ignore[misc]
                futures.pop(index).result()
                del queues[index]
        finally:
            stop.set()
