"""Admission: how much one principal, and everyone together, may hold at once.

A flood from one stolen key or one runaway agent must not starve the others
(docs/security.md#bounded-load). Every kind of thing a caller can hold open in a gateway
process has a :class:`Gauge` with a share per principal and a total:

- ``executions``: calls running (a synchronous call from ``POST /v1/executions`` or MCP
  ``tools/call`` for as long as it runs; a queued call while a worker runs it);
- ``waiters``: long-polls (``GET /v1/executions/{id}?wait=``, MCP ``wait_s`` and
  ``tasks/result``);
- ``streams``: live event streams (Server-Sent Events, the API's and the page's);
- ``sessions``: MCP 2025-11-25 sessions;
- ``listings``: MCP ``tools/list`` requests while they ask the policy about each tool.

Taking a slot past the principal's share raises :class:`TooManyRequests` (429), past the
total :class:`Overloaded` (503), both with a ``Retry-After``; nothing is done. These are
counted in this process (each replica counts its own). What the store holds is counted in the
store, across replicas: queued calls (:func:`check_queued`) and pending approvals (the policy
stage, ``pipeline/policy.py``). Those two are soft: requests racing each other may pass a
bound together by a few.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from gateway.errors import Overloaded, TooManyRequests
from gateway.observability.metrics import Metrics
from gateway.settings import Settings
from gateway.store.store import Store


@dataclass(frozen=True, slots=True)
class Bound:
    """What a gauge allows and how it says no: ``what`` names the things held (in messages),
    ``share``/``total`` the settings that bound them."""

    what: str
    code: str
    share_setting: str
    share: int
    total_setting: str
    total: int
    retry_after: int = 1


class Gauge:
    """How many of one kind of slot each principal holds, and all of them together.

    Taking and giving back never await, so on one event loop no lock is needed."""

    __slots__ = ("_held", "_total", "bound", "on_refusal")

    def __init__(self, bound: Bound, on_refusal: Callable[[str], None] | None = None) -> None:
        self.bound = bound
        self.on_refusal = on_refusal
        """Called with the setting that refused (the metrics' ``refused``)."""
        self._held: dict[str, int] = {}
        self._total = 0

    def check(self, principal: str) -> None:
        """Raise what :meth:`take` would raise now, without taking a slot."""
        bound = self.bound
        held = self._held.get(principal, 0)
        if held >= bound.share:
            self._refused(bound.share_setting)
            raise TooManyRequests(
                f"{principal} already has {held} {bound.what} (at most {bound.share} at once, "
                f"{bound.share_setting}); retry when one has ended",
                code=bound.code,
                retry_after=bound.retry_after,
                details={"setting": bound.share_setting, "limit": bound.share},
            )
        if self._total >= bound.total:
            self._refused(bound.total_setting)
            raise Overloaded(
                f"the gateway already has {self._total} {bound.what} for everyone (at most "
                f"{bound.total} at once, {bound.total_setting}); retry in a moment",
                retry_after=bound.retry_after,
                details={"setting": bound.total_setting, "limit": bound.total},
            )

    def _refused(self, setting: str) -> None:
        if self.on_refusal is not None:
            self.on_refusal(setting)

    def take(self, principal: str, *, force: bool = False) -> None:
        """Take a slot for ``principal``; with ``force``, count it even past the bounds (for
        work already admitted, such as a queued call a worker starts)."""
        if not force:
            self.check(principal)
        self._held[principal] = self._held.get(principal, 0) + 1
        self._total += 1

    def give_back(self, principal: str) -> None:
        left = self._held.get(principal, 0) - 1
        if left > 0:
            self._held[principal] = left
        elif self._held.pop(principal, None) is None:
            return  # never taken: nothing to give back
        self._total -= 1

    @contextmanager
    def hold(self, principal: str, *, force: bool = False) -> Iterator[None]:
        """A slot for the duration of the ``with`` block."""
        self.take(principal, force=force)
        try:
            yield
        finally:
            self.give_back(principal)

    def held(self, principal: str | None = None) -> int:
        """How many slots ``principal`` holds (everyone's when ``None``)."""
        return self._total if principal is None else self._held.get(principal, 0)

    def holders(self) -> frozenset[str]:
        """The principals holding at least one slot."""
        return frozenset(self._held)

    def full(self) -> frozenset[str]:
        """The principals holding their whole share."""
        share = self.bound.share
        return frozenset(p for p, n in self._held.items() if n >= share)


class Admission:
    """The gauges of one gateway process, bounded as ``settings`` say."""

    __slots__ = ("executions", "listings", "sessions", "streams", "waiters")

    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        counted = None if metrics is None else metrics.refused

        def gauge(key: str, what: str, retry_after: int = 1, section: str = "") -> Gauge:
            """The gauge bounded by ``max_<key>_per_principal`` and ``max_<key>_total`` (of
            the ``section`` of the settings, e.g. ``mcp``)."""
            where = getattr(settings, section) if section else settings
            prefix = f"{section}." if section else ""
            share, total = f"max_{key}_per_principal", f"max_{key}_total"
            bound = Bound(
                what=what,
                code=f"too_many_{key}",
                share_setting=prefix + share,
                share=getattr(where, share),
                total_setting=prefix + total,
                total=getattr(where, total),
                retry_after=retry_after,
            )
            return Gauge(bound, counted)

        self.executions = gauge("executions", "executions running")
        self.waiters = gauge("waiters", "long-polls open")
        self.streams = gauge("streams", "event streams open", retry_after=5)
        self.sessions = gauge("sessions", "MCP sessions open", retry_after=5, section="mcp")
        self.listings = gauge("listings", "tools/list requests running", section="mcp")


QUEUED_RETRY_S = 5


async def check_queued(
    store: Store, settings: Settings, principal: str, metrics: Metrics | None = None
) -> None:
    """Refuse one more asynchronous call when ``principal``'s queued calls, or everyone's,
    are at their bound (counted in the store, so across replicas)."""
    share, total = settings.max_queued_per_principal, settings.max_queued_total
    mine, everyone = await store.queued_counts(principal, share, total)
    if metrics is not None and (mine >= share or everyone >= total):
        metrics.refused("max_queued_per_principal" if mine >= share else "max_queued_total")
    if mine >= share:
        raise TooManyRequests(
            f"{principal} already has {mine} asynchronous calls queued (at most {share}, "
            "max_queued_per_principal); retry when some have run",
            code="too_many_queued",
            retry_after=QUEUED_RETRY_S,
            details={"setting": "max_queued_per_principal", "limit": share},
        )
    if everyone >= total:
        raise Overloaded(
            f"the queue already holds {everyone} asynchronous calls (at most {total}, "
            "max_queued_total); retry in a moment",
            retry_after=QUEUED_RETRY_S,
            details={"setting": "max_queued_total", "limit": total},
        )
