"""The browser adapter: declared steps on a real page in Debian's Chromium, through Playwright.

A tool declares ``steps`` — ``open``, ``click``, ``fill``, ``select``, ``wait_for``,
``extract``, ``screenshot`` — with templates from its arguments, and runs them in a named
session (a browser context kept per workspace and session name). Every call returns
evidence: the final URL, the title, a screenshot artifact (id and sha256, served at
``GET /v1/artifacts/{id}``) and the extracted values.

This module holds the declaration keys (checked at load), the gateway settings and the
adapter; ``browser_sessions`` owns Chromium, the sessions and the artifacts;
``browser_steps`` runs one call's steps and translates Playwright's errors.
docs/adapters/browser.md documents every key.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from gateway.adapters.base import AdapterCall, AdapterOutcome, AdapterSpec
from gateway.adapters.browser_sessions import (
    ArtifactStore,
    BrowserConfig,
    Networks,
    SessionPool,
    config_from,
)
from gateway.adapters.browser_steps import run_steps
from gateway.adapters.egress import EgressPolicy, check_url
from gateway.declarations.located import Faults
from gateway.declarations.model import Duration, TemplateStr, ToolDeclaration
from gateway.declarations.templates import Template, TemplateError, compile_template
from gateway.errors import ConfigError, ExecutionError, ValidationError
from gateway.settings import Settings
from gateway.types import JSON

if TYPE_CHECKING:
    from playwright.async_api import Page

log = logging.getLogger("toolgate.browser")

ACTIONS = ("open", "click", "fill", "select", "wait_for", "extract", "screenshot")
MAX_STEPS = 20
_SESSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

_ANY = frozenset({"none", "read", "write", "external"})
_READS = frozenset({"none", "read"})
SPEC_OPERATIONS: Mapping[str, frozenset[str]] = {
    "open": _READS,
    "wait_for": _READS,
    "extract": _READS,
    "screenshot": _READS,
    "click": frozenset({"read", "write", "external"}),
    "fill": frozenset({"read", "write", "external"}),
    "select": frozenset({"read", "write", "external"}),
    "steps": _ANY,
}


# --- declaration keys ---------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", arbitrary_types_allowed=True, populate_by_name=True
    )


_MODIFIERS: Mapping[str, frozenset[str]] = {
    "open": frozenset({"wait_until", "timeout"}),
    "click": frozenset({"timeout"}),
    "fill": frozenset({"value", "timeout"}),
    "select": frozenset({"value", "timeout"}),
    "wait_for": frozenset({"state", "timeout"}),
    "extract": frozenset({"as_", "attribute", "all", "name", "timeout"}),
    "screenshot": frozenset({"full_page", "name", "timeout"}),
}
_REQUIRED: Mapping[str, frozenset[str]] = {
    "fill": frozenset({"value"}),
    "select": frozenset({"value"}),
}


class StepDecl(_Frozen):
    """One browser action: exactly one action key (its target) plus that action's modifiers.

    The target of ``open`` is a URL; of ``screenshot`` the word ``page`` or a selector; of
    every other action a CSS/Playwright selector.
    """

    open: TemplateStr | None = None
    click: TemplateStr | None = None
    fill: TemplateStr | None = None
    select: TemplateStr | None = None
    wait_for: TemplateStr | None = None
    extract: TemplateStr | None = None
    screenshot: TemplateStr | None = None
    value: TemplateStr | None = None
    """The text to type (``fill``) or the option value or label to choose (``select``)."""
    as_: Literal["text", "attribute", "value", "table"] = Field(default="text", alias="as")
    """What ``extract`` reads: inner text, an attribute, a form field's value, or table rows."""
    attribute: TemplateStr | None = None
    all: bool = False
    """``extract`` every match (a list) instead of the first."""
    name: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    """Key of the extracted value or screenshot in the result."""
    state: Literal["attached", "detached", "visible", "hidden"] = "visible"
    wait_until: Literal["load", "domcontentloaded", "networkidle", "commit"] = "load"
    full_page: bool = False
    timeout: Duration | None = None
    """Seconds this step may wait (default: the tool's ``step_timeout``)."""

    @model_validator(mode="after")
    def _one_action(self) -> StepDecl:
        given = self.model_fields_set
        actions = [a for a in ACTIONS if a in given and getattr(self, a) is not None]
        if len(actions) != 1:
            raise ValueError(f"a step needs exactly one action key of {', '.join(ACTIONS)}")
        action = actions[0]
        faults = Faults()  # each fault at its own key of the step
        for key in sorted(given - set(ACTIONS) - _MODIFIERS[action]):
            shown = "as" if key == "as_" else key
            faults.add((shown,), f"key {shown!r} does not apply to a {action} step")
        for key in sorted(_REQUIRED.get(action, frozenset()) - given):
            faults.add((), f"a {action} step needs {key!r}")
        if self.as_ == "attribute" and self.attribute is None:
            faults.add(("as",), "extract as: attribute needs 'attribute'")
        faults.raise_any("StepDecl")
        return self

    @property
    def action(self) -> str:
        return next(a for a in ACTIONS if getattr(self, a) is not None)

    @property
    def target(self) -> Template:
        template: Template = getattr(self, self.action)
        return template

    def templates(self) -> Iterable[tuple[str, Template]]:
        yield self.action, self.target
        for key in ("value", "attribute"):
            template = getattr(self, key)
            if template is not None:
                yield key, template


class EgressDecl(_Frozen):
    """Where this tool's pages may send requests (checked after DNS, for every request)."""

    allow_hosts: tuple[str, ...] = ()
    """Host names or ``*.domain`` patterns; empty means any public host."""
    allow_networks: Networks = ()
    """Private, loopback or link-local networks this tool may reach (refused otherwise)."""

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        EgressPolicy.build(value, ())  # raises ValueError naming a bad host
        return value


class BrowserOptions(_Frozen):
    """The browser adapter's declaration keys (beside the common ones)."""

    session: TemplateStr = Field(default_factory=lambda: compile_template("default"))
    """Session name: a template, e.g. ``"{arguments.session}"``; ``default`` if not given."""
    steps: tuple[StepDecl, ...] = Field(min_length=1, max_length=MAX_STEPS)
    step_timeout: Duration = 10.0
    """How long a step may wait for its selector or navigation (capped by the deadline)."""
    egress: EgressDecl = EgressDecl()

    def templates(self) -> Iterable[tuple[tuple[str | int, ...], Template]]:
        """Every template, for the loader's check that referenced arguments exist."""
        yield ("session",), self.session
        for i, step in enumerate(self.steps):
            for key, template in step.templates():
                yield ("steps", i, key), template


SPEC = AdapterSpec(
    name="browser",
    operations=SPEC_OPERATIONS,
    probes={"text": frozenset({"session", "selector"}), "url": frozenset({"session"})},
    options=BrowserOptions,
)


def create(settings: Settings, config: Mapping[str, Any]) -> BrowserAdapter:
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
        await _precheck(options, call, policy)
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


async def _precheck(options: BrowserOptions, call: AdapterCall, policy: EgressPolicy) -> None:
    """Refuse a first ``open`` to a refused address before Chromium is even started."""
    first = options.steps[0]
    if first.open is not None:
        with contextlib.suppress(TemplateError):
            await check_url(first.open.render(call.context), policy)


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
