"""Shadow policies: a candidate policy decided beside the enforcing one, never enforced
(docs/policies.md#shadow-policies).

The pipeline's policy stage decides with the enforcing backend, then hands the input and the
enforced decision to ``Shadow.submit``, which only puts them on a bounded queue and returns:
the call never waits for the candidate, and nothing the candidate answers flows back to it.
A full queue drops the comparison and counts it (``toolgate_policy_shadow_skipped{reason=
"queue_full"}``); so does a candidate decision past ``shadow.timeout``, a candidate service
that gives no decision (``unavailable``) or any other fault (``error``). (The budget is a
remote candidate's: an embedded one decides in-process without yielding, in tens of µs.)
A candidate that fails to evaluate denies, like any policy (fail closed): that is a
decision, and compared.

One task (started by the first submit, on the event loop that runs the calls) takes the queue
in order, asks the candidate, and for each decision whose ``result`` differs records the
difference, of kind ``<enforced>_to_<candidate>`` (``allow_to_deny``, ``deny_to_allow``,
``allow_to_require_approval``, ...): counted in ``toolgate_policy_shadow_differences{kind}``,
written to the decision log (path ``toolgate/shadow``, both decisions with their reasons) when
it is on, and stored (the ``shadow_differences`` table, one transaction per batch taken off
the queue) for ``toolgate policy shadow report``, which therefore counts every replica's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from gateway.errors import ConfigError, PolicyUnavailable
from gateway.observability.telemetry import Telemetry
from gateway.policy import bundle
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.settings import Settings, ShadowSettings
from gateway.store.records import ShadowDifference
from gateway.store.store import Store
from gateway.types import JSON, Decision, PolicyBackend, RemotePolicy

log = logging.getLogger("toolgate.policy.shadow")

_Submitted = tuple[Mapping[str, JSON], Decision, Mapping[str, str], str, int]
"""(input, enforced decision, what it was for, the enforcing revision, when in ns)."""

BATCH = 200
"""The most differences one store transaction writes."""


def difference_kind(enforced: Decision, candidate: Decision) -> str | None:
    """``<enforced>_to_<candidate>`` when the two results differ, else None."""
    if enforced.result is candidate.result:
        return None
    return f"{enforced.result.value}_to_{candidate.result.value}"


def load_shadow_sources(settings: Settings) -> PolicySources | None:
    """The candidate's sources as ``settings.shadow`` names them (None: no shadow);
    ConfigError names ``shadow.*`` and the fault."""
    shadow = settings.shadow
    if shadow is None:
        return None
    if shadow.bundle is not None:
        path = settings.path(shadow.bundle)
        try:
            return bundle.sources_of(bundle.read(path.read_bytes()))
        except OSError as exc:
            raise ConfigError(f"shadow.bundle: cannot read {path}: {exc}") from exc
        except ConfigError as exc:
            raise ConfigError([f"shadow.bundle {path}: {p}" for p in exc.problems]) from exc
        except (ValueError, UnicodeDecodeError) as exc:
            raise ConfigError(f"shadow.bundle {path}: a file is not JSON or UTF-8: {exc}") from exc
    assert shadow.rego_dir is not None and shadow.policies_dir is not None
    try:
        return load_policy_sources(
            settings.path(shadow.rego_dir), settings.path(shadow.policies_dir)
        )
    except ConfigError as exc:
        raise ConfigError([f"shadow: {p}" for p in exc.problems]) from exc


async def open_shadow(
    settings: Settings, sources: PolicySources | None, store: Store, telemetry: Telemetry
) -> Shadow | None:
    """The shadow of ``sources`` (None when there are none), its backend opened as the
    enforcing one's would be: embedded, or ``shadow.opa_url`` with the OPA backend."""
    config = settings.shadow
    if sources is None or config is None:
        return None
    candidate: PolicyBackend
    if settings.policy_backend == "opa":
        from gateway.policy.opa import OpaPolicy

        assert config.opa_url is not None  # Settings checks it
        opa = OpaPolicy(
            sources, config.opa_url, timeout=config.timeout, cache_ttl=settings.opa_cache_ttl
        )
        await opa.open()
        candidate = opa
    else:
        from gateway.policy.embedded import EmbeddedPolicy

        try:
            candidate = EmbeddedPolicy(sources)
        except ConfigError as exc:
            raise ConfigError([f"shadow: {p}" for p in exc.problems]) from exc
    return Shadow(candidate, sources.revision(), config, store, telemetry)


class Shadow:
    """A candidate backend, its queue and the task that compares (module docstring)."""

    def __init__(
        self,
        candidate: PolicyBackend,
        revision: str,
        config: ShadowSettings,
        store: Store,
        telemetry: Telemetry,
    ) -> None:
        self.candidate = candidate
        self.revision = revision
        """The candidate's policy revision."""
        self._budget = config.timeout if isinstance(candidate, RemotePolicy) else None
        """A remote candidate's time budget; an in-process one decides without yielding,
        so a deadline could not interrupt it (and would cost a timer per decision)."""
        self._queue: asyncio.Queue[_Submitted] = asyncio.Queue(config.queue)
        self._store = store
        self._telemetry = telemetry
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def submit(
        self,
        document: Mapping[str, JSON],
        enforced: Decision,
        ids: Mapping[str, str],
        revision: str,
    ) -> None:
        """Queue one enforced decision (of policy ``revision``) for comparison; never waits,
        never raises: a full queue drops it, counted."""
        if self._closed:
            return
        try:
            self._queue.put_nowait((document, enforced, ids, revision, time.time_ns()))
        except asyncio.QueueFull:
            self._skip("queue_full")
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def settled(self) -> None:
        """Wait until every queued decision has been compared and recorded."""
        if self._task is not None:
            await self._queue.join()

    async def aclose(self) -> None:
        """Stop comparing (what is still queued is dropped) and close the candidate."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            if task.get_loop() is asyncio.get_running_loop():
                await asyncio.gather(task, return_exceptions=True)
        await self.candidate.aclose()

    # -- the task ---------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            taken = 1
            try:
                found: list[ShadowDifference] = []
                await self._compare(first, found)
                while not self._queue.empty() and len(found) < BATCH:
                    item = self._queue.get_nowait()
                    taken += 1
                    await self._compare(item, found)
                if found:
                    await self._record(found)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("the shadow policy's comparison failed")
            finally:
                for _ in range(taken):
                    self._queue.task_done()

    async def _compare(self, item: _Submitted, found: list[ShadowDifference]) -> None:
        document, enforced, ids, revision, at_ns = item
        try:
            if self._budget is None:
                candidate = await self.candidate.decide(document)
            else:
                async with asyncio.timeout(self._budget):
                    candidate = await self.candidate.decide(document)
        except TimeoutError:
            self._skip("timeout")
            return
        except PolicyUnavailable:
            self._skip("unavailable")
            return
        except Exception:
            log.exception("the shadow policy failed to decide")
            self._skip("error")
            return
        kind = difference_kind(enforced, candidate)
        if (metrics := self._telemetry.metrics) is not None:
            metrics.shadow_compared_one(kind)
        if kind is None:
            return
        enforced_json, candidate_json = enforced.to_json(), candidate.to_json()
        if (decisions := self._telemetry.decisions) is not None:
            decisions.write_shadow(
                document, enforced_json, candidate_json, kind, ids, (revision, self.revision)
            )
        tool = document.get("tool")
        found.append(
            ShadowDifference(
                id=f"sd_{uuid.uuid4().hex}",
                at_ms=at_ns // 1_000_000,
                kind=kind,
                tool_name=str(tool.get("name", "")) if isinstance(tool, dict) else "",
                execution_id=ids.get("execution_id"),
                call_id=ids.get("call_id", ""),
                enforced_revision=revision,
                candidate_revision=self.revision,
                enforced_json=json.dumps(enforced_json, default=str),
                candidate_json=json.dumps(candidate_json, default=str),
            )
        )

    async def _record(self, found: list[ShadowDifference]) -> None:
        try:
            await self._store.record_shadow_differences(found)
        except Exception as exc:
            log.warning("%d shadow differences were not stored: %s", len(found), exc)

    def _skip(self, reason: str) -> None:
        if (metrics := self._telemetry.metrics) is not None:
            metrics.shadow_skip(reason)


def candidate_dirs(settings: Settings) -> tuple[Path, Path]:
    """The candidate's two directories (``toolgate policy promote``); ConfigError when the
    shadow is not configured as directories."""
    shadow = settings.shadow
    if shadow is None or shadow.rego_dir is None or shadow.policies_dir is None:
        raise ConfigError(
            "no shadow policy directories are configured (shadow.rego_dir and "
            "shadow.policies_dir): a bundle candidate is promoted by deploying the bundle"
        )
    return settings.path(shadow.rego_dir), settings.path(shadow.policies_dir)
