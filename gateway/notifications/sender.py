"""The sender: the workers' loop that claims due notifications from the outbox and POSTs them,
signed, through egress control (the server's one HTTP client, ``gateway.adapters.shared.client``).

Bounded: ``notifications.concurrency`` attempts at once per process, each within
``notifications.timeout``, reading at most ``notifications.max_response_bytes`` of the answer.
A 2xx answer delivers; a connection failure, a timeout, 408, 429 or 5xx is retried with
exponential backoff (``retry_initial`` doubling up to ``retry_max``); another answer, an
address egress refuses, or running out of ``max_attempts`` or ``max_age`` dead-letters it.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass

import anyio

from gateway.adapters.shared import client as http
from gateway.adapters.shared.egress import EgressRefused, check_host
from gateway.adapters.shared.urls import parse_url
from gateway.errors import ToolgateError
from gateway.instance import INSTANCE_ID
from gateway.notifications import signing
from gateway.notifications.endpoints import Target
from gateway.observability.metrics import Metrics
from gateway.settings import NotificationSettings
from gateway.store.outbox import Delivery
from gateway.store.store import Store

log = logging.getLogger("toolgate.notifications")
RETRIED_STATUSES = frozenset({408, 429})


@dataclass(frozen=True, slots=True)
class Attempt:
    """How one attempt ended: ``outcome`` delivered, retry or dead (``refused``: dead, by
    egress control), and why."""

    outcome: str
    why: str


class Sender:
    """Sends the outbox's notifications; ``run`` until cancelled, then ``aclose``."""

    def __init__(
        self,
        store: Store,
        config: NotificationSettings,
        targets: dict[str, Target],
        metrics: Metrics | None = None,
    ) -> None:
        self.store, self.config, self.targets, self.metrics = store, config, targets, metrics
        self.lease_ms = int((2 * config.timeout + 5) * 1000)
        self.client = http.Client(ssl_context=http.system_trust(), limit=config.concurrency)

    async def run(self) -> None:
        """Claim up to ``concurrency`` due notifications, send them together, again."""
        while True:
            try:
                batch = await self.store.claim_notifications(
                    INSTANCE_ID, self.config.concurrency, self.lease_ms
                )
            except ToolgateError as exc:
                log.warning("cannot read the notification outbox: %s", exc)
                batch = []
            if not batch:
                await anyio.sleep(self.config.poll_interval)
                continue
            async with anyio.create_task_group() as tg:
                for delivery in batch:
                    tg.start_soon(self.deliver, delivery)

    async def deliver(self, delivery: Delivery) -> None:
        """One attempt at ``delivery``, and its settlement in the outbox. A fault of the
        sender itself is logged, never raised: the claim runs out and another attempt
        follows, and the workers beside it go on."""
        try:
            await self._deliver(delivery)
        except Exception:
            log.exception("sending notification %s failed; it will be tried again", delivery.id)

    async def _deliver(self, delivery: Delivery) -> None:
        attempt = await self.attempt(delivery)
        outcome, due = attempt.outcome, int(time.time() * 1000)
        if outcome == "retry":
            due += self.backoff_ms(delivery.attempts)
            if delivery.attempts >= self.config.max_attempts:
                outcome = "dead"
                attempt = Attempt(
                    "dead", f"{attempt.why}; gave up after {delivery.attempts} attempts"
                )
            elif due > delivery.created_ms + int(self.config.max_age * 1000):
                outcome = "dead"
                attempt = Attempt("dead", f"{attempt.why}; gave up: older than max_age")
        status = {"delivered": "delivered", "retry": "pending"}.get(outcome, "dead")
        error = None if outcome == "delivered" else attempt.why[:1000]
        try:
            await self.store.settle_notification(delivery.id, INSTANCE_ID, status, due, error)
        except ToolgateError as exc:  # the claim runs out and the attempt is made again
            log.warning("cannot record notification %s: %s", delivery.id, exc)
            return
        self._log(delivery, attempt)
        if self.metrics is not None:
            self.metrics.notification(attempt.outcome)

    async def attempt(self, delivery: Delivery) -> Attempt:
        target = self.targets.get(delivery.endpoint)
        if target is None:
            return Attempt("dead", "its endpoint is no longer configured")
        body = delivery.body.encode("utf-8")
        headers = signing.headers(target.key, delivery.id, int(time.time()), body)
        headers["content-type"] = "application/json"
        try:
            with anyio.fail_after(self.config.timeout):
                return await self._post(target, body, headers)
        except EgressRefused as exc:
            return Attempt("refused", f"egress control refused it: {exc.message}")
        except ToolgateError as exc:  # e.g. dns_failed: retried when it may pass
            return Attempt("retry" if exc.retryable else "dead", exc.message)
        except TimeoutError:
            return Attempt("retry", f"no answer within {self.config.timeout:g}s")
        except http.Unreachable as exc:
            return Attempt("retry", f"could not connect: {exc.reason}")
        except http.Lost:
            return Attempt("retry", "the connection was lost before the answer came")
        except ValueError as exc:  # a request the client refuses to send
            return Attempt("dead", f"it cannot be sent: {exc}"[:300])

    async def _post(self, target: Target, body: bytes, headers: dict[str, str]) -> Attempt:
        url = parse_url(target.url)
        check_host(url, target.policy)
        sent = http.Attempt()  # a POST: never sent again by the client
        networks, fields = target.policy.networks, list(headers.items())
        async with self.client.open(sent, networks, "POST", url, fields, body) as answer:
            # the rest of a longer answer is not read: the connection is dropped
            await http.read_body(answer, self.config.max_response_bytes, sent.body)
        code = answer.status
        if 200 <= code < 300:
            return Attempt("delivered", f"answered {code}")
        if code >= 500 or code in RETRIED_STATUSES:
            return Attempt("retry", f"answered {code}")
        return Attempt("dead", f"answered {code}, which is not retried")

    def backoff_ms(self, attempts: int) -> int:
        """The wait after the ``attempts``-th failed attempt: doubling, capped, jittered."""
        base = min(self.config.retry_initial * 2 ** min(attempts - 1, 32), self.config.retry_max)
        return int(base * random.uniform(0.9, 1.0) * 1000)

    def _log(self, delivery: Delivery, attempt: Attempt) -> None:
        about = (
            f"notification {delivery.id} ({delivery.event} of approval {delivery.approval_id}) "
            f"to {delivery.endpoint}, attempt {delivery.attempts}"
        )
        if attempt.outcome == "delivered":
            log.info("%s: delivered (%s)", about, attempt.why)
        elif attempt.outcome == "retry":
            log.warning("%s failed, will retry: %s", about, attempt.why)
        else:
            log.error("%s failed for good (dead-lettered): %s", about, attempt.why)

    async def aclose(self) -> None:
        await self.client.aclose()


async def send_notifications(sender: Sender | None) -> None:
    """What the workers run (nothing when no endpoint is configured)."""
    if sender is not None:
        await sender.run()
