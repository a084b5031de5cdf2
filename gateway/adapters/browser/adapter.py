"""The browser adapter: declared steps on a real page in Debian's Chromium, through Playwright.

A tool declares ``steps`` — ``open``, ``click``, ``fill``, ``select``, ``wait_for``,
``extract``, ``screenshot`` — with templates from its arguments, and runs them in a named
session (a browser context kept per workspace and session name). Every call returns
evidence: the final URL, the title, a screenshot artifact (id and sha256, served at
``GET /v1/artifacts/{id}``) and the extracted values.

``spec`` holds the declaration keys (checked at load); this module the adapter;
``sessions`` owns Chromium and the sessions (artifacts: ``gateway.adapters.shared.artifacts``);
``steps`` runs one call's steps and translates Playwright's errors.
docs/adapters/browser.md documents every key.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import ValidationError as PydanticValidationError

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.adapters.browser.sessions import (
    BrowserConfig,
    SessionPool,
    config_from,
)
from gateway.adapters.browser.spec import BrowserOptions
from gateway.adapters.browser.steps import run_steps
from gateway.adapters.shared.artifacts import ArtifactStore
from gateway.adapters.shared.egress import EgressPolicy, check_url
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.model import ToolDeclaration
from gateway.declarations.templates import TemplateError
from gateway.errors import ConfigError, ExecutionError, ValidationError
from gateway.settings import Settings
from gateway.types import JSON

if TYPE_CHECKING:
    from playwright.async_api import Page

log = logging.getLogger("toolgate.browser")

_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def create(settings: Settings, config: Mapping[str, Any], catalogue: Catalogue) -> BrowserAdapter:
    """Check ``adapters.browser``; Chromium itself starts on the first call."""
    try:
        parsed = config_from(config)
    except PydanticValidationError as exc:
        problems = [
            f"adapters.browser.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}"
            for err in exc.errors()
        ]
        raise ConfigError(problems) from exc
    if not parsed.executable.is_file():
        log.warning("browser tools will fail until chromium is at %s", parsed.executable)
    return BrowserAdapter(parsed, ArtifactStore.of(settings))


# --- the adapter --------------------------------------------------------------------------


class BrowserAdapter:
    """Browser sessions in one lazily launched Chromium."""

    name: ClassVar[str] = "browser"

    def __init__(self, config: BrowserConfig, artifacts: ArtifactStore) -> None:
        self.config = config
        self.artifacts = artifacts
        self.pool = SessionPool(config)

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        options = options_of(call.tool)
        name = _session_name(options, call)
        policy = EgressPolicy.build(
            options.egress.allow_hosts or ("*",),
            self.config.allow_networks + options.egress.allow_networks,
        )
        await _precheck(options, call, policy, self.pool)
        async with self.pool.use(call.workspace.id, name, policy) as session:
            return await run_steps(self.artifacts, call, options, session)

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        """``url`` or ``text`` of the session's current page, read without navigating."""
        session = self.pool.sessions.get((call.workspace.id, params["session"]))
        if session is None:
            raise ExecutionError(f"there is no browser session {params['session']!r}")
        async with session.lock:
            page = session.page
            if page is None or page.is_closed():
                raise ExecutionError(f"browser session {params['session']!r} has no open page")
            if name == "url":
                return page.url
            timeout = max(min(5.0, call.seconds_left()), 0.1) * 1000
            return await _probe_text(page, params["selector"], timeout)

    async def aclose(self) -> None:
        await self.pool.aclose()


def options_of(tool: ToolDeclaration) -> BrowserOptions:
    """The tool's browser keys, refused if ``operation`` names one action ``steps`` is not.

    The loader gives an adapter's Options no view of ``operation``, so this one check
    happens on the call (``declaration_invalid``) rather than at load.
    """
    options = tool.options
    assert isinstance(options, BrowserOptions)
    if tool.operation != "steps":
        actions = [step.action for step in options.steps]
        if actions != [tool.operation]:
            raise ExecutionError(
                f"{tool.ref} declares operation {tool.operation} but its steps are "
                f"{actions}: use operation: steps, or one {tool.operation} step",
                code="declaration_invalid",
            )
    return options


async def _precheck(
    options: BrowserOptions, call: AdapterCall, policy: EgressPolicy, pool: SessionPool
) -> None:
    """Refuse a first ``open`` to a refused address before Chromium is even started."""
    first = options.steps[0]
    if first.open is not None:
        with contextlib.suppress(TemplateError):
            await check_url(first.open.render(call.context), policy, lookup=pool.lookup)


def _session_name(options: BrowserOptions, call: AdapterCall) -> str:
    try:
        name = options.session.render(call.context)
    except TemplateError as exc:
        raise ValidationError(f"session: {exc}", code="invalid_session") from exc
    if not _SESSION.match(name):
        raise ValidationError(
            f"session name {name[:80]!r} must be 1-64 letters, digits, '.', '_' or '-'",
            code="invalid_session",
        )
    return name


async def _probe_text(page: Page, selector: str, timeout: float) -> str | None:
    from playwright.async_api import Error as PlaywrightError

    try:
        text: str = await page.locator(selector).first.inner_text(timeout=timeout)
    except PlaywrightError as exc:
        raise ExecutionError(
            f"no element matches selector {selector!r}", code="selector_not_found"
        ) from exc
    return text
