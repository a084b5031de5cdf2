"""The gateway's Prometheus series, in a registry of its own (docs/operations.md#metrics).

One ``Metrics`` per runtime: its registry is not ``prometheus_client``'s global default, so
several gateways (and tests) in one process never collide. The hot path only adds to
Python ints and floats (a histogram's observation is one ``bisect`` and two additions, a counter's a
dict update); ``prometheus_client`` sees them only at scrape time, through the collector
below. A ``prometheus_client`` ``Histogram.observe`` costs several times as much in the
pipeline's loop (``bench/telemetry_cost.py``).

The pipeline's series are updated on the event loop's thread; the store's hooks run on
whichever thread ran the transaction, so theirs take a lock.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST
FAST = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
SLOW = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
SIZES = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
UNDECLARED_TOOL = "_undeclared"
"""The ``tool`` label of a call naming a tool no catalogue declared: one series for every
such name, so callers cannot add series (no declared name starts with ``_``)."""


class _Histogram:
    """Counts per bucket (not cumulative: ``counts[i]`` for ``bounds[i-1] < v <= bounds[i]``,
    the last one for ``+Inf``) and the sum."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, float(running)))
        return out


class _Family:
    """A labelled histogram: one ``_Histogram`` per label values."""

    def __init__(self, name: str, doc: str, labels: Sequence[str], bounds: Sequence[float]):
        self.name, self.doc, self.labels, self.bounds = name, doc, list(labels), bounds
        self.children: dict[tuple[str, ...], _Histogram] = {}

    def child(self, *values: str) -> _Histogram:
        found = self.children.get(values)
        if found is None:
            found = self.children[values] = _Histogram(self.bounds)
        return found

    def metric(self) -> Metric:
        family = HistogramMetricFamily(self.name, self.doc, labels=self.labels)
        if not self.labels:
            self.child()  # an unlabelled series shows zeros before its first observation
        for values, hist in sorted(self.children.items()):
            family.add_metric(list(values), hist.buckets(), hist.total)
        return family


class _Counter:
    def __init__(self, name: str, doc: str, labels: Sequence[str]) -> None:
        self.name, self.doc, self.labels = name, doc, list(labels)
        self.values: dict[tuple[str, ...], int] = {}

    def inc(self, *values: str) -> None:
        self.values[values] = self.values.get(values, 0) + 1

    def metric(self) -> Metric:
        family = CounterMetricFamily(self.name, self.doc, labels=self.labels)
        if not self.labels:
            self.values.setdefault((), 0)
        for values, count in sorted(self.values.items()):
            family.add_metric(list(values), float(count))
        return family


GAUGES = {
    "approvals_pending": (
        "toolgate_approvals_pending",
        "Approvals waiting for a decision (read from the store at each scrape).",
    ),
    "in_flight": ("toolgate_executions_in_flight", "Executions this process is running now."),
    "queued": (
        "toolgate_executions_queued",
        "Executions queued for a worker (read from the store at each scrape).",
    ),
}
"""The gauges ``scrape`` sets before each exposition: key → (series, help)."""


class Metrics:
    """Every series the gateway exposes; the methods are what the pipeline, the store, the
    policy backends and the lifecycle call."""

    def __init__(self) -> None:
        self.executions = _Counter(
            "toolgate_executions",
            "Calls that ended, by tool, outcome and error phase.",
            ["tool", "outcome", "error_phase"],
        )
        self.stages = _Family(
            "toolgate_stage_duration_seconds",
            "Time a call spent in each pipeline stage.",
            ["stage"],
            SLOW,
        )
        self.policy_seconds = _Family(
            "toolgate_policy_decision_duration_seconds",
            "Time the policy backend took to decide.",
            ["backend"],
            FAST,
        )
        self.policy_cache = _Counter(
            "toolgate_policy_cache_lookups",
            "Decision-cache lookups by result (hit|miss); hit ratio = hit / (hit + miss).",
            ["result"],
        )
        self.policy_unavailable_calls = _Counter(
            "toolgate_policy_unavailable",
            "Calls refused because the policy backend gave no decision (OPA down, slow, or "
            "answering other than 200), by backend and cause (timeout|connection|status|"
            "not_json).",
            ["backend", "cause"],
        )
        self.approvals = _Counter(
            "toolgate_approvals",
            "Approval events: requested, approved, denied, expired.",
            ["event"],
        )
        self.lock_waits = _Counter(
            "toolgate_lock_waits", "Calls that found a lock held and had to wait.", []
        )
        self.lock_timeouts = _Counter(
            "toolgate_lock_timeouts", "Calls that gave up waiting for a lock (lock_timeout).", []
        )
        self.lock_wait_seconds = _Family(
            "toolgate_lock_wait_duration_seconds",
            "How long calls that waited for a lock waited (until held, cancelled or timed out).",
            [],
            SLOW,
        )
        self.store_seconds = _Family(
            "toolgate_store_transaction_duration_seconds",
            "Store transactions, BEGIN to COMMIT, by domain operation.",
            ["operation"],
            FAST,
        )
        self.group_commit = _Family(
            "toolgate_store_group_commit_size",
            "Writes committed together in one SQLite group commit.",
            [],
            SIZES,
        )
        self.recovery = _Counter(
            "toolgate_recovery_actions",
            "Executions recovery settled after a crash, by action.",
            ["action"],
        )
        self.refusals = _Counter(
            "toolgate_refusals",
            "Requests refused by a bound on load (429, 503 overloaded), by the setting.",
            ["setting"],
        )
        self.reloads = _Counter(
            "toolgate_reloads",
            "Reloads of tools.d, rego/ and policies/ by result (applied|unchanged|refused).",
            ["result"],
        )
        self.shadow_compared = _Counter(
            "toolgate_policy_shadow_decisions",
            "Decisions the shadow (candidate) policy made beside the enforcing one, compared.",
            [],
        )
        self.shadow_differences = _Counter(
            "toolgate_policy_shadow_differences",
            "Decisions the shadow policy made otherwise than the enforcing one, by kind "
            "(<enforced>_to_<candidate>: allow_to_deny, deny_to_allow, ...).",
            ["kind"],
        )
        self.shadow_skipped = _Counter(
            "toolgate_policy_shadow_skipped",
            "Decisions not compared with the shadow policy, by reason (queue_full|timeout|"
            "unavailable|error); the enforced decision is never affected.",
            ["reason"],
        )
        self.notifications = _Counter(
            "toolgate_notifications",
            "Approval notification attempts by outcome (delivered|retry|dead|refused: dead-"
            "lettered, refused by egress control).",
            ["outcome"],
        )
        self._tools: frozenset[str] = frozenset()
        """The values the ``tool`` label may take (``declare_tools``)."""
        self._series = (
            self.executions,
            self.stages,
            self.policy_seconds,
            self.policy_cache,
            self.policy_unavailable_calls,
            self.approvals,
            self.lock_waits,
            self.lock_wait_seconds,
            self.lock_timeouts,
            self.recovery,
            self.refusals,
            self.reloads,
            self.shadow_compared,
            self.shadow_differences,
            self.shadow_skipped,
            self.notifications,
        )
        """What ``collect`` exposes as it stands; the store's series it reads under
        ``_store_lock`` (the store's threads write them)."""
        self._store_lock = threading.Lock()
        self._gauges = dict.fromkeys(GAUGES, 0)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)

    # -- what the rest of the gateway calls ------------------------------------------------

    def stage(self, name: str, seconds: float) -> None:
        self.stages.child(name).observe(seconds)

    def declare_tools(self, names: Iterable[str]) -> None:
        """Tool names the ``tool`` label may take: each generation's catalogue adds its own
        (kept after a reload, so a call of a retired tool that ends later counts under its
        name). Every label value comes from a declaration or from the gateway's code, never
        from a caller: the number of series is bounded by configuration."""
        self._tools = self._tools.union(names)

    def execution(self, tool: str, outcome: str, error_phase: str) -> None:
        label = tool if tool in self._tools else UNDECLARED_TOOL
        self.executions.inc(label, outcome, error_phase)

    def policy_decision(self, backend: str, seconds: float) -> None:
        self.policy_seconds.child(backend).observe(seconds)

    def policy_cache_lookup(self, hit: bool) -> None:
        """The hook a policy backend with a decision cache calls on each lookup."""
        self.policy_cache.inc("hit" if hit else "miss")

    def policy_unavailable(self, backend: str, cause: str) -> None:
        """A call refused (or a queued one failed) for want of a decision."""
        self.policy_unavailable_calls.inc(backend, cause)

    def approval(self, event: str) -> None:
        self.approvals.inc(event)

    def notification(self, outcome: str) -> None:
        self.notifications.inc(outcome)

    def lock_waited(self, seconds: float, timed_out: bool) -> None:
        self.lock_waits.inc()
        self.lock_wait_seconds.child().observe(seconds)
        if timed_out:
            self.lock_timeouts.inc()

    def store_transaction(self, name: str, wall_s: float, cpu_s: float | None) -> None:
        """``store.observe``'s hook (called on the thread that ran the transaction)."""
        with self._store_lock:
            self.store_seconds.child(name).observe(wall_s)

    def group_commit_size(self, size: int) -> None:
        with self._store_lock:
            self.group_commit.child().observe(size)

    def recovered(self, action: str) -> None:
        self.recovery.inc(action)

    def refused(self, setting: str) -> None:
        """A bound on load refused a request (``setting`` names the bound)."""
        self.refusals.inc(setting)

    def reloaded(self, result: str) -> None:
        self.reloads.inc(result)

    def shadow_compared_one(self, kind: str | None) -> None:
        """The shadow policy decided beside the enforcing one: ``kind`` the difference, or
        None when both agreed."""
        self.shadow_compared.inc()
        if kind is not None:
            self.shadow_differences.inc(kind)

    def shadow_skip(self, reason: str) -> None:
        self.shadow_skipped.inc(reason)

    # -- the scrape ------------------------------------------------------------------------

    def scrape(self, pending_approvals: int, queued: int, in_flight: int) -> bytes:
        """The text exposition, with the gauges read at scrape time."""
        self._gauges.update(approvals_pending=pending_approvals, queued=queued, in_flight=in_flight)
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        """The ``prometheus_client`` collector: every series as it stands."""
        for series in self._series:
            yield series.metric()
        with self._store_lock:
            yield self.store_seconds.metric()
            yield self.group_commit.metric()
        for key, (name, doc) in GAUGES.items():
            yield _gauge(name, doc, self._gauges[key])

    def kinds(self) -> list[tuple[str, str]]:
        """(name, type) of every series the registry exposes (a counter's name without its
        ``_total``)."""
        return sorted({(m.name, m.type) for m in self.collect()})


def _gauge(name: str, doc: str, value: float) -> Metric:
    return GaugeMetricFamily(name, doc, value=float(value))
