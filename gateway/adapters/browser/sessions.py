"""Chromium for the browser adapter: launched lazily, one context per session, reaped when idle.

``SessionPool`` owns the Playwright driver, the one Chromium process and a browser context
per ``(workspace id, session name)``. Chromium starts on the first call, not with the
gateway. Each session has one current page and an anyio lock (one action at a time per
session in this process; the declared lock key serialises across processes). A deadline or
a cancellation closes the session's page, never its context, the browser or the gateway.
Sessions idle longer than ``idle_timeout`` are closed by a background reaper; ``aclose``
closes everything.

Egress: each context's only way out is its own ``proxy.EgressProxy`` on loopback, which
resolves, checks every address with ``gateway.adapters.shared.egress.check_url`` (the same
check as the HTTP adapter: scheme, allowed hosts, every resolved address public unless a
declared network allows it) and connects only to a checked address, or answers 403. That
covers documents, redirects, subresources, fetches, WebSockets and service workers alike;
``ENFORCED_ARGS`` (added to any configured ``args``) keep QUIC and non-proxied WebRTC off.

Screenshots are stored by ``gateway.adapters.shared.artifacts.ArtifactStore`` under
``var/artifacts/`` with the owning principal; ``GET /v1/artifacts/{id}`` serves them to that
principal only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from gateway.adapters.browser.proxy import EgressProxy
from gateway.adapters.shared.egress import EgressPolicy, Lookup, Networks
from gateway.errors import ExecutionError
from gateway.settings import Duration

if TYPE_CHECKING:
    from playwright.async_api import (
        Browser,
        BrowserContext,
        Page,
        Playwright,
    )

log = logging.getLogger("toolgate.browser")

DEFAULT_EXECUTABLE = Path("/usr/bin/chromium")
DEFAULT_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
)
ENFORCED_ARGS = (
    "--disable-quic",  # HTTP/3 is UDP: it would not go through the egress proxy
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--proxy-server=http://127.0.0.1:9",  # contexts override it; anything else goes nowhere
)
"""Added to ``args`` whatever the configuration says: the browser's only way out is a proxy."""
CLOSE_GRACE = 5.0
"""Seconds a shielded close (page, context, browser) may take before it is abandoned."""

MAX_REFUSALS = 20


class Viewport(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    width: int = Field(default=1280, ge=200, le=4096)
    height: int = Field(default=800, ge=200, le=4096)


class BrowserConfig(BaseModel):
    """``adapters.browser`` in toolgate.yaml."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    executable: Path = DEFAULT_EXECUTABLE
    args: tuple[str, ...] = DEFAULT_ARGS
    idle_timeout: Duration = 300.0
    """A session unused this long is closed (its cookies and page go with it)."""
    launch_timeout: Duration = 30.0
    max_sessions: int = Field(default=16, ge=1, le=256)
    viewport: Viewport = Viewport()
    allow_networks: Networks = ()
    """Non-public networks every browser tool of this gateway may reach (an operator's or a
    test's override; a tool can allow more with its own ``egress.allow_networks``)."""


# --- sessions -----------------------------------------------------------------------------


@dataclass(eq=False)
class Session:
    """A browser context and its current page, used by one call at a time."""

    key: tuple[str, str]
    context: BrowserContext
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    page: Page | None = None
    last_used: float = field(default_factory=time.monotonic)
    policy: EgressPolicy = field(default_factory=lambda: EgressPolicy(frozenset({"*"})))
    refused: list[str] = field(default_factory=list)
    """Why the egress proxy refused requests of this session's pages during this call."""
    refusals: list[tuple[str, str]] = field(default_factory=list)
    """``(target, why)`` of each of them: the call's ``egress_refused`` evidence."""
    traceparent: str | None = None
    proxy: EgressProxy | None = None
    """The context's egress proxy (its only way out)."""
    lookup: Lookup | None = None
    """The resolver of its egress checks (None: the system's)."""

    async def current_page(self) -> Page:
        """The session's page, opened if a deadline or cancellation closed the last one."""
        if self.page is None or self.page.is_closed():
            self.page = await self.context.new_page()
            self.traceparent = None
        return self.page

    async def set_traceparent(self, traceparent: str | None) -> None:
        """Send the caller's W3C trace context with every request of this call."""
        page = await self.current_page()
        if traceparent != self.traceparent:
            headers = {"traceparent": traceparent} if traceparent else {}
            await page.set_extra_http_headers(headers)
            self.traceparent = traceparent

    async def close_page(self) -> None:
        """Close the current page (shielded: it runs while the call is being cancelled)."""
        page, self.page = self.page, None
        if page is None:
            return
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            with contextlib.suppress(Exception):
                await page.close()

    def record_refusal(self, target: str, reason: str) -> None:
        """The egress proxy refused a connection of this session's pages: say so in the call."""
        if len(self.refused) < MAX_REFUSALS:
            self.refused.append(reason)
            self.refusals.append((target, reason))
        log.info("browser session %s: refused %s: %s", self.key, target[:200], reason)


def missing_browser(executable: Path) -> ExecutionError:
    return ExecutionError(
        f"chromium not found at {executable}: install Debian's chromium "
        "(apt-get install -y chromium) or set adapters.browser.executable",
        code="browser_unavailable",
        retryable=False,
    )


class SessionPool:
    """The lazily launched browser and its sessions."""

    def __init__(self, config: BrowserConfig) -> None:
        self.config = config
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._sessions: dict[tuple[str, str], Session] = {}
        self._lock = anyio.Lock()
        self._reaper: asyncio.Task[None] | None = None
        self.launches = 0
        self.lookup: Lookup | None = None
        """The egress proxies' resolver (None: the system's); tests inject one."""

    @property
    def browser(self) -> Browser | None:
        return self._browser

    @property
    def sessions(self) -> dict[tuple[str, str], Session]:
        return self._sessions

    @contextlib.asynccontextmanager
    async def use(self, workspace: str, name: str, policy: EgressPolicy) -> AsyncIterator[Session]:
        """Hold the session ``(workspace, name)`` for one call, creating it if needed."""
        session = await self._session((workspace, name))
        async with session.lock:
            session.policy, session.refused, session.refusals = policy, [], []
            try:
                yield session
            finally:
                session.last_used = time.monotonic()

    async def _session(self, key: tuple[str, str]) -> Session:
        """The session ``key``, made (and Chromium launched or relaunched) if needed."""
        async with self._lock:  # one creator at a time: never two contexts for one key
            browser = await self._ensure_browser()
            session = self._sessions.get(key)
            if session is None:
                await self.reap_idle()
                if len(self._sessions) >= self.config.max_sessions:
                    raise ExecutionError(
                        f"all {self.config.max_sessions} browser sessions are in use; "
                        "retry when one is idle",
                        code="browser_busy",
                        retryable=True,
                    )
                session = await self._new_session(browser, key)
            session.last_used = time.monotonic()  # the reaper leaves it to the waiting call
            return session

    async def _new_session(self, browser: Browser, key: tuple[str, str]) -> Session:
        viewport = self.config.viewport
        holder: list[Session] = []  # the proxy needs the session, the session the context
        proxy = EgressProxy(
            lambda: holder[0].policy if holder else EgressPolicy(),
            lambda target, why: holder[0].record_refusal(target, why) if holder else None,
            lookup=self.lookup,
        )
        await proxy.start()
        try:
            context = await browser.new_context(
                viewport={"width": viewport.width, "height": viewport.height},
                # <-loopback>: Chromium would send loopback addresses around the proxy
                proxy={"server": proxy.url, "bypass": "<-loopback>"},
                service_workers="allow",  # their requests go through the proxy as well
                accept_downloads=False,
            )
        except BaseException:
            await proxy.aclose()
            raise
        session = Session(key, context, proxy=proxy, lookup=self.lookup)
        holder.append(session)
        self._sessions[key] = session
        log.info("browser session %s opened", key)
        return session

    async def _ensure_browser(self) -> Browser:
        """The running browser; a crashed one is dropped (with its sessions) and relaunched."""
        if self._browser is None or not self._browser.is_connected():
            await self._drop_browser()
            self._browser = await self._launch()
            if self._reaper is None:
                self._reaper = asyncio.get_running_loop().create_task(self._reap_forever())
        return self._browser

    async def _launch(self) -> Browser:
        exe = self.config.executable
        if not exe.is_file() or not os.access(exe, os.X_OK):
            raise missing_browser(exe)
        try:
            from playwright.async_api import Error as PlaywrightError
            from playwright.async_api import async_playwright
        except ImportError as exc:
            raise ExecutionError(
                "the browser adapter needs the Python package playwright "
                "(pip install 'playwright>=1.50,<2'); never run 'playwright install'",
                code="browser_unavailable",
            ) from exc
        self._playwright = await async_playwright().start()
        try:
            browser = await self._playwright.chromium.launch(
                executable_path=str(exe),
                args=[*self.config.args, *ENFORCED_ARGS],
                timeout=self.config.launch_timeout * 1000,
            )
        except PlaywrightError as exc:
            log.error("chromium at %s did not start: %s", exe, exc)
            await self._stop_playwright()
            raise ExecutionError(
                f"chromium at {exe} did not start ({_first_line(exc.message)}); "
                "see the gateway log",
                code="browser_unavailable",
                retryable=True,
            ) from exc
        self.launches += 1
        log.info("chromium %s launched from %s", browser.version, exe)
        return browser

    async def close_session(self, key: tuple[str, str]) -> None:
        session = self._sessions.pop(key, None)
        if session is None:
            return
        with anyio.move_on_after(CLOSE_GRACE, shield=True):
            with contextlib.suppress(Exception):
                await session.context.close()
        if session.proxy is not None:
            await session.proxy.aclose()
        log.info("browser session %s closed", key)

    async def reap_idle(self) -> None:
        """Close sessions unused for ``idle_timeout`` (never one a call is using)."""
        cutoff = time.monotonic() - self.config.idle_timeout
        for key, session in list(self._sessions.items()):
            if session.last_used < cutoff and not session.lock.locked():
                await self.close_session(key)

    async def _reap_forever(self) -> None:
        interval = min(max(self.config.idle_timeout / 2, 0.05), 30.0)
        while True:
            await anyio.sleep(interval)
            try:
                await self.reap_idle()
            except Exception:
                log.exception("closing idle browser sessions failed")

    async def aclose(self) -> None:
        """Close every session, the browser and the driver."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
            self._reaper = None
        for key in list(self._sessions):
            await self.close_session(key)
        await self._drop_browser()

    async def _drop_browser(self) -> None:
        browser, self._browser = self._browser, None
        for session in self._sessions.values():
            if session.proxy is not None:
                await session.proxy.aclose()
        self._sessions.clear()
        if browser is not None:
            with anyio.move_on_after(CLOSE_GRACE, shield=True):
                with contextlib.suppress(Exception):
                    await browser.close()
        await self._stop_playwright()

    async def _stop_playwright(self) -> None:
        playwright, self._playwright = self._playwright, None
        if playwright is not None:
            with anyio.move_on_after(CLOSE_GRACE, shield=True):
                with contextlib.suppress(Exception):
                    await playwright.stop()


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "no reason given"
    return line[:limit]


def config_from(raw: Any) -> BrowserConfig:
    """``adapters.browser`` parsed into a BrowserConfig (the caller maps errors)."""
    return BrowserConfig.model_validate(raw or {})
