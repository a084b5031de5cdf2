"""The gateway's Prometheus series, in a registry of its own (docs/operations.md#metrics).

One ``Metrics`` per runtime: its registry is not ``prometheus_client``'s global default, so
several gateways (and tests) in one process never collide. The hot path pays one
``observe``/``inc`` on a label child bound once (``_child``); nothing else per call.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
FAST = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
SLOW = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class Metrics:
    """Every series the gateway exposes; the methods are what the pipeline, the store, the
    policy backends and the lifecycle call."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.executions = Counter(
            "toolgate_executions",
            "Calls that ended, by tool, outcome (or status while parked) and error phase.",
            ["tool", "outcome", "error_phase"],
            registry=r,
        )
        self.stage_seconds = Histogram(
            "toolgate_stage_duration_seconds",
            "Time a call spent in each pipeline stage.",
            ["stage"],
            buckets=SLOW,
            registry=r,
        )
        self.policy_seconds = Histogram(
            "toolgate_policy_decision_duration_seconds",
            "Time the policy backend took to decide.",
            ["backend"],
            buckets=FAST,
            registry=r,
        )
        self.policy_cache = Counter(
            "toolgate_policy_cache_lookups",
            "Decision-cache lookups by result (hit|miss); hit ratio = hit / (hit + miss).",
            ["result"],
            registry=r,
        )
        self.approvals = Counter(
            "toolgate_approvals",
            "Approval events: requested, approved, denied, expired.",
            ["event"],
            registry=r,
        )
        self.approvals_pending = Gauge(
            "toolgate_approvals_pending",
            "Approvals waiting for a decision (read from the store at each scrape).",
            registry=r,
        )
        self.lock_waits = Counter(
            "toolgate_lock_waits",
            "Calls that found a lock held and had to wait.",
            registry=r,
        )
        self.lock_wait_seconds = Histogram(
            "toolgate_lock_wait_duration_seconds",
            "How long calls that waited for a lock waited (until held, cancelled or timed out).",
            buckets=SLOW,
            registry=r,
        )
        self.lock_timeouts = Counter(
            "toolgate_lock_timeouts",
            "Calls that gave up waiting for a lock (lock_timeout).",
            registry=r,
        )
        self.store_seconds = Histogram(
            "toolgate_store_transaction_duration_seconds",
            "Store transactions, BEGIN to COMMIT, by domain operation.",
            ["operation"],
            buckets=FAST,
            registry=r,
        )
        self.group_commit = Histogram(
            "toolgate_store_group_commit_size",
            "Writes committed together in one SQLite group commit.",
            buckets=SIZES,
            registry=r,
        )
        self.in_flight = Gauge(
            "toolgate_executions_in_flight",
            "Executions this process is running now.",
            registry=r,
        )
        self.queued = Gauge(
            "toolgate_executions_queued",
            "Executions queued for a worker (read from the store at each scrape).",
            registry=r,
        )
        self.recovery = Counter(
            "toolgate_recovery_actions",
            "Executions recovery settled after a crash, by action.",
            ["action"],
            registry=r,
        )
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # -- what the rest of the gateway calls ------------------------------------------------

    def stage(self, name: str, seconds: float) -> None:
        self._child(self.stage_seconds, name).observe(seconds)

    def execution(self, tool: str, outcome: str, error_phase: str) -> None:
        self._child(self.executions, tool, outcome, error_phase).inc()

    def policy_decision(self, backend: str, seconds: float) -> None:
        self._child(self.policy_seconds, backend).observe(seconds)

    def policy_cache_lookup(self, hit: bool) -> None:
        """The hook a policy backend with a decision cache calls on each lookup."""
        self._child(self.policy_cache, "hit" if hit else "miss").inc()

    def approval(self, event: str) -> None:
        self._child(self.approvals, event).inc()

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        self.lock_waits.inc()
        self.lock_wait_seconds.observe(seconds)
        if timed_out:
            self.lock_timeouts.inc()

    def store_transaction(self, name: str, wall_s: float, cpu_s: float) -> None:
        """``store.observe``'s hook (called on the thread that ran the transaction)."""
        self._child(self.store_seconds, name).observe(wall_s)

    def group_commit_size(self, size: int) -> None:
        self.group_commit.observe(size)

    def recovered(self, action: str) -> None:
        self._child(self.recovery, action).inc()

    def scrape(self, pending_approvals: int, queued: int, in_flight: int) -> bytes:
        """The text exposition, with the gauges read at scrape time set first."""
        self.approvals_pending.set(pending_approvals)
        self.queued.set(queued)
        self.in_flight.set(in_flight)
        return generate_latest(self.registry)

    def kinds(self) -> list[tuple[str, str]]:
        """(name, type) of every series the registry exposes (a counter's name without its
        ``_total``)."""
        return sorted({(m.name, m.type) for m in self.registry.collect()})
