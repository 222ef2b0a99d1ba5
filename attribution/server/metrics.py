"""``/metrics``: the verdict store and the worker's health in Prometheus' text format
(prometheus-client). docs/server.md lists every metric.

The numbers are read from the store and the spool at each scrape (kept for ``CACHE``
seconds), so every server process and restart reports the same totals: the counters are the
store's counts, and they move when the worker writes verdicts. Labels are bounded: causes are
rule ids, and at most ``MAX_SERIES`` label sets per family are kept, the rest summed into
``other``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from attribution.config import Config
from attribution.errors import AttributionError
from attribution.store import Store

CACHE = 10.0  # seconds a scrape's numbers are reused
MAX_SERIES = 500  # label sets per family; the rest are summed into one 'other' set
MAX_NODES = 200  # responsible nodes listed; the rest are summed into 'other'
LATENCY_BOUNDS = (30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 4 * 3600.0, 86400.0)
VERDICT_LABELS = ("cluster", "partition", "terminal_state", "sub_domain", "cause")


def _bounded(
    rows: Iterable[tuple[tuple[str, ...], float]], cap: int
) -> list[tuple[tuple[str, ...], float]]:
    """The ``cap`` largest label sets, and the rest summed under ``other`` in every label."""
    ordered = sorted(rows, key=lambda item: (-item[1], item[0]))
    kept = ordered[:cap]
    rest = ordered[cap:]
    if rest:
        width = len(rest[0][0])
        kept.append((("other",) * width, sum(v for _, v in rest)))
    return kept


class StoreCollector(Collector):
    """Collects the families below from ``config``'s store and spool (``store``: the
    store's path when not the configuration's, as ``sattr serve --db`` gives it)."""

    def __init__(self, config: Config, store: Any) -> None:
        self.config = config
        self.store = store
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def describe(self) -> Iterator[Metric]:
        return iter(())  # families are known only at collection; nothing to check at register

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] > CACHE:
                self._cached = (now, self._families())
            families = self._cached[1]
        yield from families

    def _families(self) -> list[Metric]:
        up = GaugeMetricFamily(
            "attribution_store_up", "1 when the verdict store could be read at this scrape"
        )
        out: list[Metric] = [up]
        try:
            with Store(self.store, readonly=True) as store:
                out += self._store_families(store)
            up.add_metric([], 1)
        except AttributionError:
            up.add_metric([], 0)
        out += self._worker_families()
        return out

    def _store_families(self, store: Store) -> list[Metric]:
        verdicts = CounterMetricFamily(
            "attribution_job_verdicts",
            "Verdicts in the store, by cluster, partition, terminal_state, sub_domain and cause",
            labels=VERDICT_LABELS,
        )
        rows = [
            (tuple(str(r[k] or "") for k in VERDICT_LABELS), float(r["verdicts"]))
            for r in store.verdict_totals()
        ]
        for labels, value in _bounded(rows, MAX_SERIES):
            verdicts.add_metric(list(labels), value)
        blamed = CounterMetricFamily(
            "attribution_responsible_node_verdicts",
            "Verdicts that held a node responsible, by node and sub_domain (the most blamed"
            f" {MAX_NODES} nodes; the rest summed as node=other)",
            labels=("node", "sub_domain"),
        )
        per_node: Counter[tuple[str, ...]] = Counter()
        for r in store.responsible_totals():
            per_node[(str(r["node"]), str(r["sub_domain"]))] += int(r["verdicts"])
        for labels, value in _bounded(per_node.items(), MAX_NODES):
            blamed.add_metric(list(labels), value)
        nodes = GaugeMetricFamily(
            "attribution_responsible_nodes",
            "Distinct nodes held responsible by at least one stored verdict",
        )
        nodes.add_metric([], len({node for node, _ in per_node}))
        counts, total, seconds = store.latency_buckets(LATENCY_BOUNDS)
        latency = HistogramMetricFamily(
            "attribution_verdict_latency_seconds",
            "Seconds from a job's end to its verdict, for verdicts the worker made from the"
            " spool (rediagnoses are not counted)",
        )
        buckets = [(str(float(b)), float(c)) for b, c in zip(LATENCY_BOUNDS, counts, strict=True)]
        latency.add_metric([], [*buckets, ("+Inf", float(total))], seconds)
        comments = GaugeMetricFamily(
            "attribution_admin_comment_backlog",
            "AdminComment write-backs not done: error (the worker retries them) or pending",
            labels=("kind",),
        )
        backlog = store.comment_backlog()
        for kind in ("error", "pending"):
            comments.add_metric([kind], float((backlog.get(kind) or {}).get("count", 0)))
        return [verdicts, blamed, nodes, latency, comments]

    def _worker_families(self) -> list[Metric]:
        from attribution.status import collect

        status = collect(self.config, config_file=None, now=datetime.now(UTC))
        out: list[Metric] = []
        healthy = GaugeMetricFamily(
            "attribution_healthy", "1 when 'sattr status' finds no problem, else 0"
        )
        healthy.add_metric([], 1 if status.healthy else 0)
        out.append(healthy)
        queue = status.queue
        depth = GaugeMetricFamily(
            "attribution_queue_entries",
            "Spool entries by state: ready, settling, retry_wait, work, failed",
            labels=("state",),
        )
        oldest = GaugeMetricFamily(
            "attribution_queue_oldest_ready_seconds",
            "How long the oldest ready spool entry has waited (0 when none waits)",
        )
        if queue is not None:
            for name in ("ready", "settling", "retry_wait", "work", "failed"):
                depth.add_metric([name], float(getattr(queue, name)))
            oldest.add_metric([], float(queue.oldest_ready_wait or 0.0))
        out += [depth, oldest]
        sweeps = CounterMetricFamily(
            "attribution_reconciliation_sweeps",
            "Reconciliation sweeps of the last day, by cluster and outcome (ok, error)",
            labels=("cluster", "outcome"),
        )
        found = CounterMetricFamily(
            "attribution_reconciliation_enqueued_jobs",
            "Jobs the reconciliation sweeps of the last day found missing from the spool",
            labels=("cluster",),
        )
        if status.reconciliation is not None:
            for total in status.reconciliation.totals:
                sweeps.add_metric([total.cluster, "ok"], float(total.sweeps - total.errors))
                sweeps.add_metric([total.cluster, "error"], float(total.errors))
                found.add_metric([total.cluster], float(total.enqueued))
        out += [sweeps, found]
        retried = CounterMetricFamily(
            "attribution_admin_comment_rewrites",
            "AdminComments the running worker wrote on a later try, since it started",
        )
        info = status.worker.info or {}
        value = info.get("comments_rewritten")
        retried.add_metric([], float(value) if isinstance(value, int | float) else 0.0)
        out.append(retried)
        return out


__all__ = ["LATENCY_BOUNDS", "StoreCollector"]
