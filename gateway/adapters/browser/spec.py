"""What ``adapter: browser`` declarations may say, checked when ``tools.d`` loads.

The steps (one action each, with its modifiers), the session name, the egress allowlist,
and the ``AdapterSpec`` the loader checks a declaration against. Light on purpose: no
Playwright, no adapter; docs/adapters/browser.md documents every key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Literal

from pydantic import ConfigDict, Field, model_validator

from gateway.adapters.shared.egress import EgressDecl
from gateway.declarations.located import Faults
from gateway.declarations.model import Duration, Frozen, TemplateStr
from gateway.declarations.spec import AdapterSpec
from gateway.declarations.templates import Template, compile_template

ACTIONS = ("open", "click", "fill", "select", "wait_for", "extract", "screenshot")
MAX_STEPS = 20

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


class _Aliased(Frozen):
    """Keys given by their alias (``as``) or their field name."""

    model_config = ConfigDict(populate_by_name=True)


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


class StepDecl(_Aliased):
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


class BrowserOptions(_Aliased):
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
