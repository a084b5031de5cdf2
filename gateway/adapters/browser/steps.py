"""One browser call: the declared steps on the session's page, and what they leave behind.

``run_steps`` runs a tool's steps under the call's deadline and cancellation and builds the
outcome: data, evidence (page, screenshots stored as artifacts, extracted values) and the side
effect report. Playwright's exceptions are translated here, at the adapter's edge
(``translate_error``): no Playwright text or stack trace reaches the agent. A step that runs
out of its own time fails the call and keeps the page; the call's deadline or a cancellation
closes the page (never the context or the browser).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio

from gateway.adapters.base import AdapterCall, AdapterOutcome, Evidence
from gateway.adapters.base import SideEffectReport as Effect
from gateway.adapters.browser.proxy import MARKER
from gateway.adapters.browser.sessions import Session
from gateway.adapters.shared.artifacts import Artifact, ArtifactStore
from gateway.adapters.shared.egress import EgressRefused, check_url
from gateway.declarations.templates import Template, TemplateError
from gateway.errors import ExecutionError, ToolgateError, ValidationError
from gateway.types import JSON, Outcome, SideEffect

if TYPE_CHECKING:
    from playwright.async_api import Locator, Page

    from gateway.adapters.browser.spec import BrowserOptions, StepDecl

log = logging.getLogger("toolgate.browser")

ACTING = frozenset({"click", "fill", "select"})
"""Actions that change the page (and through it, maybe the world)."""
DEADLINE_MARGIN = 0.25
"""Seconds kept back from the call's deadline so a step's own timeout fires first."""


async def run_steps(
    artifacts: ArtifactStore, call: AdapterCall, options: BrowserOptions, session: Session
) -> AdapterOutcome:
    """Run ``options.steps`` in ``session`` (held by the caller) and report what happened."""
    return await _Run(artifacts, call, options, session).run()


class _StepFailed(Exception):
    def __init__(self, error: ToolgateError) -> None:
        super().__init__(error.message)
        self.error = error


class _Deadline(Exception):
    """The call's own budget ran out inside a step."""


@dataclass
class _Run:
    """The state of one call: what ran, what was read, what was stored."""

    artifacts: ArtifactStore
    call: AdapterCall
    options: BrowserOptions
    session: Session
    done: list[dict[str, JSON]] = field(default_factory=list)
    extracted: dict[str, JSON] = field(default_factory=dict)
    shots: dict[str, Artifact] = field(default_factory=dict)
    status: int | None = None
    last_page_shot: Artifact | None = None

    async def run(self) -> AdapterOutcome:
        """The steps under the call's cancellation; the page is closed if they do not end."""
        box: list[AdapterOutcome | ToolgateError] = []
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(_cancel_when_set, self.call.cancelled, tg.cancel_scope)
                box.append(await self._guarded())
                tg.cancel_scope.cancel()
        finally:
            if not box or (isinstance(box[0], ToolgateError) and box[0].code == "timeout"):
                await self.session.close_page()
        if not box:
            return self._cancelled()
        if isinstance(box[0], ToolgateError):
            raise box[0]
        return box[0]

    async def _guarded(self) -> AdapterOutcome | ToolgateError:
        try:
            return await self._steps()
        except _Deadline:
            step = self.options.steps[min(len(self.done), len(self.options.steps) - 1)]
            return ExecutionError(
                f"{self.call.tool.ref} did not finish before its deadline (step "
                f"{len(self.done) + 1}, {step.action}); the page was closed, the session is kept",
                code="timeout",
                retryable=True,
            )
        except ToolgateError as exc:
            return exc

    async def _steps(self) -> AdapterOutcome:
        page = await self.session.current_page()
        await self.session.set_traceparent(self.call.traceparent)
        for index, step in enumerate(self.options.steps):
            try:
                await self._step(page, index, step)
            except _StepFailed as failed:
                return await self._failed(page, failed.error)
        return await self._succeeded(page)

    def _timeout(self, step: StepDecl) -> tuple[float, bool]:
        """(milliseconds, limited by the call's deadline?)."""
        left = self.call.seconds_left() - DEADLINE_MARGIN
        if left <= 0:
            raise _Deadline()
        own = step.timeout or self.options.step_timeout
        return (min(own, left) * 1000, own >= left)

    def _render(self, index: int, step: StepDecl, template: Template | None) -> str:
        if template is None:
            return ""
        try:
            return template.render(self.call.context)
        except TemplateError as exc:
            raise ValidationError(
                f"step {index + 1} ({step.action}): {exc}", code="template_error"
            ) from exc

    async def _step(self, page: Page, index: int, step: StepDecl) -> None:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        target = self._render(index, step, step.target)
        timeout, by_deadline = self._timeout(step)
        began = time.monotonic()
        try:
            await _HANDLERS[step.action](self, page, index, step, target, timeout)
        except PlaywrightTimeout as exc:
            if by_deadline:
                raise _Deadline() from exc
            raise _StepFailed(_timed_out(index, step, target, timeout)) from exc
        except PlaywrightError as exc:
            raise _StepFailed(self._translate(exc, index, step, target)) from exc
        ms = int((time.monotonic() - began) * 1000)
        self.done.append({"action": step.action, "target": target[:500], "ms": ms})

    def _translate(self, exc: Exception, index: int, step: StepDecl, target: str) -> ToolgateError:
        message = str(getattr(exc, "message", "") or exc)
        log.info("browser step %d (%s) failed: %s", index + 1, step.action, message)
        if "net::ERR_TUNNEL_CONNECTION_FAILED" in message and self.session.refused:
            return EgressRefused(self.session.refused[-1])
        return translate_error(message, index, step, target)

    # --- the actions ----------------------------------------------------------------------

    async def _open(self, page: Page, i: int, step: StepDecl, url: str, timeout: float) -> None:
        await check_url(url, self.session.policy, lookup=self.session.lookup)
        response = await page.goto(url, wait_until=step.wait_until, timeout=timeout)
        self.status = response.status if response is not None else None
        await _check_redirects(page, response, self.session)
        marker = response.headers.get(MARKER.lower()) if response is not None else None
        if marker == "refused" and self.session.refused:
            await page.goto("about:blank")
            raise _StepFailed(EgressRefused(self.session.refused[-1]))
        if marker is not None and marker.startswith("ERR_"):  # the proxy could not connect
            self.status = None
            raise _StepFailed(translate_error(f"net::{marker}", i, step, url))

    async def _click(self, page: Page, i: int, step: StepDecl, sel: str, timeout: float) -> None:
        await page.locator(sel).click(timeout=timeout)

    async def _fill(self, page: Page, i: int, step: StepDecl, sel: str, timeout: float) -> None:
        await page.locator(sel).fill(self._render(i, step, step.value), timeout=timeout)

    async def _select(self, page: Page, i: int, step: StepDecl, sel: str, timeout: float) -> None:
        wanted = self._render(i, step, step.value)
        locator = page.locator(sel)
        await locator.wait_for(state="attached", timeout=timeout)
        found = await locator.evaluate(_OPTION_JS, wanted, timeout=timeout)
        if found < 0:
            raise _StepFailed(
                ExecutionError(
                    f"step {i + 1} (select): {sel!r} is not a <select> element",
                    code="wrong_element",
                )
            )
        if found == 0:
            raise _StepFailed(
                ExecutionError(
                    f"step {i + 1} (select): {sel!r} has no option with value or label "
                    f"{wanted[:200]!r}",
                    code="option_not_found",
                )
            )
        await locator.select_option(wanted, timeout=timeout)

    async def _wait_for(self, page: Page, i: int, step: StepDecl, sel: str, timeout: float) -> None:
        await page.locator(sel).first.wait_for(state=step.state, timeout=timeout)

    async def _extract(self, page: Page, i: int, step: StepDecl, sel: str, timeout: float) -> None:
        locator = page.locator(sel)
        await locator.first.wait_for(state="attached", timeout=timeout)
        attribute = self._render(i, step, step.attribute)
        value = await _read(locator if step.all else locator.first, step, attribute, timeout)
        self.extracted[step.name or f"step_{i + 1}"] = value

    async def _screenshot(
        self, page: Page, i: int, step: StepDecl, target: str, timeout: float
    ) -> None:
        if target == "page":
            png = await page.screenshot(full_page=step.full_page, timeout=timeout)
        else:
            png = await page.locator(target).screenshot(timeout=timeout)
        artifact = await self._store(png)
        self.shots[step.name or f"step_{i + 1}"] = artifact
        self.last_page_shot = artifact if target == "page" else None

    # --- outcomes -------------------------------------------------------------------------

    async def _store(self, png: bytes) -> Artifact:
        save = functools.partial(
            self.artifacts.save,
            png,
            content_type="image/png",
            owner=str(self.call.context.get("actor", {}).get("user_id", "")),
            workspace=self.call.workspace.id,
            execution_id=self.call.execution_id,
        )
        return await anyio.to_thread.run_sync(save)

    async def _page_evidence(self, page: Page, reuse: bool) -> tuple[str, str, Artifact | None]:
        """(final URL, title, screenshot) — best effort: a broken page gives no picture."""
        from playwright.async_api import Error as PlaywrightError

        shot = self.last_page_shot if reuse else None
        try:
            title = await page.title()
            if shot is None:
                timeout = max(min(5.0, self.call.seconds_left() - DEADLINE_MARGIN), 0.1)
                shot = await self._store(await page.screenshot(timeout=timeout * 1000))
        except PlaywrightError as exc:
            log.info("no page evidence for %s: %s", self.call.execution_id, exc)
            return page.url, "", shot
        return page.url, title, shot

    def _data(self, url: str, title: str, shot: Artifact | None) -> tuple[dict[str, JSON], bool]:
        budget = max(self.call.output_budget - 2048, 256)
        extracted, truncated = fit_budget(self.extracted, budget)
        data: dict[str, JSON] = {
            "session": self.session.key[1],
            "url": url,
            "title": title,
            "status": self.status,
            "extracted": extracted,
            "screenshot": _shot_json(shot),
            "screenshots": {k: _shot_json(v) for k, v in self.shots.items()},
            "steps": self.done,
        }
        if self.session.refused:
            data["refused_requests"] = list(self.session.refused)
        return data, truncated

    def _evidence(self, url: str, title: str, shot: Artifact | None) -> tuple[Evidence, ...]:
        out = [Evidence("page", url, None, {"title": title, "session": self.session.key[1]})]
        shots = [shot] if shot is not None else []
        shots += [other for other in self.shots.values() if other is not shot]
        out.extend(_screenshot_evidence(artifact) for artifact in shots)
        budget = max(self.call.output_budget - 2048, 256)
        for key, value in fit_budget(self.extracted, budget)[0].items():
            digest = _sha256_json(self.extracted[key])
            out.append(Evidence("extracted", key, digest, {"value": value}))
        for target, why in self.session.refusals:
            out.append(Evidence("egress_refused", target, None, {"reason": why}))
        return tuple(out)

    def _effect(self, committed: bool) -> Effect:
        acted = [d for d in self.done if d["action"] in ACTING]
        summary = "; ".join(f"{d['action']} {d['target']}" for d in self.done)[:1000]
        return Effect(bool(acted), committed and bool(acted), summary or "no step ran")

    async def _succeeded(self, page: Page) -> AdapterOutcome:
        last = self.options.steps[-1]
        url, title, shot = await self._page_evidence(page, reuse=last.action == "screenshot")
        data, truncated = self._data(url, title, shot)
        return AdapterOutcome(
            Outcome.SUCCEEDED,
            data=data,
            side_effect=self._effect(committed=True),
            evidence=self._evidence(url, title, shot),
            truncated=truncated,
        )

    async def _failed(self, page: Page, error: ToolgateError) -> AdapterOutcome:
        url, title, shot = await self._page_evidence(page, reuse=False)
        data, truncated = self._data(url, title, shot)
        clicked = any(d["action"] in ("click", "select") for d in self.done)
        writes = self.call.tool.side_effect in (SideEffect.WRITE, SideEffect.EXTERNAL)
        outcome = Outcome.UNKNOWN if clicked and writes else Outcome.FAILED
        return AdapterOutcome(
            outcome,
            data=data,
            side_effect=self._effect(committed=False),
            evidence=self._evidence(url, title, shot),
            error=error,
            truncated=truncated,
        )

    def _cancelled(self) -> AdapterOutcome:
        return AdapterOutcome(
            Outcome.CANCELLED,
            data={"session": self.session.key[1], "steps": self.done},
            side_effect=self._effect(committed=False),
            error=ExecutionError(
                "the call was cancelled; the page was closed, the session is kept",
                code="cancelled",
            ),
        )


StepHandler = Callable[[_Run, "Page", int, "StepDecl", str, float], Awaitable[None]]
_HANDLERS: dict[str, StepHandler] = {
    "open": _Run._open,
    "click": _Run._click,
    "fill": _Run._fill,
    "select": _Run._select,
    "wait_for": _Run._wait_for,
    "extract": _Run._extract,
    "screenshot": _Run._screenshot,
}


async def _cancel_when_set(event: anyio.Event, scope: anyio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _check_redirects(page: Page, response: Any, session: Session) -> None:
    """Fail the step when a redirect hop was refused (the egress proxy never connected it)."""
    hops: list[str] = [page.url]
    request = response.request if response is not None else None
    while request is not None:
        hops.append(request.url)
        request = request.redirected_from
    for url in hops:
        if url.startswith(("http://", "https://")):
            try:
                await check_url(url, session.policy, lookup=session.lookup)
            except ExecutionError as exc:
                await page.goto("about:blank")
                raise _StepFailed(exc) from exc


_OPTION_JS = """(el, v) => el.tagName !== 'SELECT' ? -1
  : [...el.options].filter(o => o.value === v || o.label === v).length"""
_TABLE_JS = """el => {
  const table = el.tagName === 'TABLE' ? el : el.closest('table') || el.querySelector('table');
  if (!table) return null;
  const cells = r => [...r.cells].map(c => c.innerText.trim());
  const rows = [...table.rows];
  const head = rows.length && [...rows[0].cells].every(c => c.tagName === 'TH')
    ? cells(rows.shift()) : null;
  return {headers: head, rows: rows.map(cells)};
}"""


async def _read(locator: Locator, step: StepDecl, attribute: str, timeout: float) -> JSON:
    """The value ``extract`` asked for, from the first match or (``all``) every match."""
    if step.as_ == "table":
        if step.all:
            return [_rows(t) for t in await locator.evaluate_all(f"els => els.map({_TABLE_JS})")]
        return _rows(await locator.evaluate(_TABLE_JS, timeout=timeout))
    if step.as_ == "attribute":
        if step.all:
            js = "(els, a) => els.map(e => e.getAttribute(a))"
            return await locator.evaluate_all(js, attribute)
        return await locator.get_attribute(attribute, timeout=timeout)
    if step.as_ == "value":
        if step.all:
            return await locator.evaluate_all("els => els.map(e => e.value)")
        return await locator.input_value(timeout=timeout)
    if step.all:
        return list(await locator.all_inner_texts())
    return await locator.inner_text(timeout=timeout)


def _rows(table: Any) -> JSON:
    """Rows as objects keyed by the header row when there is one, else lists of cells."""
    if table is None:
        return None
    headers, rows = table.get("headers"), table.get("rows", [])
    if not headers:
        return rows
    return [dict(zip(headers, row, strict=False)) for row in rows]


def _timed_out(index: int, step: StepDecl, target: str, timeout_ms: float) -> ToolgateError:
    seconds = f"{timeout_ms / 1000:g}s"
    where = f"step {index + 1} ({step.action})"
    if step.action == "open":
        return ExecutionError(
            f"{where}: {target[:200]} did not load within {seconds}",
            code="navigation_timeout",
            retryable=True,
        )
    if step.action == "wait_for" and step.state in ("hidden", "detached"):
        return ExecutionError(
            f"{where}: selector {target!r} was still there after {seconds}",
            code="wait_timeout",
            retryable=True,
        )
    return ExecutionError(
        f"{where}: no element matched selector {target!r} within {seconds}",
        code="selector_not_found",
    )


_NET_ERRORS = {
    "ERR_NAME_NOT_RESOLVED": ("cannot resolve the host of", False),
    "ERR_CONNECTION_REFUSED": ("connection refused by", True),
    "ERR_CONNECTION_RESET": ("connection reset by", True),
    "ERR_CONNECTION_TIMED_OUT": ("connection timed out to", True),
    "ERR_ADDRESS_UNREACHABLE": ("address unreachable:", True),
    "ERR_INTERNET_DISCONNECTED": ("no network to reach", True),
    "ERR_CERT_": ("TLS certificate rejected for", False),
    "ERR_SSL_": ("TLS handshake failed with", True),
    "ERR_ABORTED": ("navigation aborted for", True),
    "ERR_TOO_MANY_REDIRECTS": ("too many redirects from", False),
}


def translate_error(message: str, index: int, step: StepDecl, target: str) -> ToolgateError:
    """A Playwright error message → a project error the agent can act on (no raw text)."""
    where = f"step {index + 1} ({step.action})"
    if "strict mode violation" in message:
        count = re.search(r"resolved to (\d+) elements", message)
        many = f"{count.group(1)} elements" if count else "several elements"
        return ExecutionError(
            f"{where}: selector {target!r} matches {many}; make it match one",
            code="selector_ambiguous",
        )
    for marker, (text, retryable) in _NET_ERRORS.items():
        if f"net::{marker}" in message:
            return ExecutionError(
                f"{where}: {text} {target[:200]}", code="navigation_failed", retryable=retryable
            )
    net = re.search(r"net::(ERR_[A-Z_]+)", message)
    if net:
        return ExecutionError(
            f"{where}: the browser could not load {target[:200]} ({net.group(1)})",
            code="navigation_failed",
        )
    if "has been closed" in message or "Target closed" in message:
        return ExecutionError(
            f"{where}: the page was closed while the step ran", code="page_closed", retryable=True
        )
    if "while parsing" in message or "is not a valid selector" in message:
        return ExecutionError(f"{where}: {target!r} is not a valid selector", code="bad_selector")
    if "Element is not" in message:
        return ExecutionError(
            f"{where}: the element {target!r} cannot be used for {step.action}",
            code="wrong_element",
        )
    return ExecutionError(
        f"{where} failed in the browser; see the gateway log", code="browser_error", retryable=True
    )


def fit_budget(values: Mapping[str, JSON], budget: int) -> tuple[dict[str, JSON], bool]:
    """``values`` cut to about ``budget`` bytes of JSON: long texts and lists are shortened."""
    room = [budget]
    out = {key: _fit(value, room) for key, value in values.items()}
    return out, room[0] < 0


def _fit(value: JSON, room: list[int]) -> JSON:
    if isinstance(value, str):
        size = len(value.encode("utf-8")) + 2
        if size <= room[0]:
            room[0] -= size
            return value
        keep = max(room[0], 0)
        room[0] = -1
        return value.encode("utf-8")[:keep].decode("utf-8", "ignore")
    if isinstance(value, list):
        items: list[JSON] = []
        for item in value:
            if room[0] <= 0:
                room[0] = -1
                break
            items.append(_fit(item, room))
        return items
    if isinstance(value, dict):
        return {str(k): _fit(v, room) for k, v in value.items()}
    room[0] -= len(json.dumps(value))
    return value


def _sha256_json(value: JSON) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _shot_json(artifact: Artifact | None) -> JSON:
    if artifact is None:
        return None
    return {"artifact_id": artifact.id, "href": artifact.href, "sha256": artifact.sha256}


def _screenshot_evidence(artifact: Artifact) -> Evidence:
    return Evidence(
        "screenshot",
        artifact.href,
        artifact.sha256,
        {"artifact_id": artifact.id, "content_type": artifact.content_type, "size": artifact.size},
    )
