"""What the declaration loader checks a tool against: one ``AdapterSpec`` per adapter kind.

The specs are given to the loader (``load_catalogue(tools_dir, specs)``); this package never
imports an adapter. Each kind declares its spec in a light module of its own
(``gateway/adapters/<kind>/spec.py``), and ``gateway.adapters.registry.SPECS`` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from gateway.declarations.templates import Template

Loc = tuple[str | int, ...]
"""Where a value is in a declaration file, as keys and list indexes (for ``Lines.where``)."""


class NoOptions(BaseModel):
    """For adapters that take no declaration keys of their own."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@runtime_checkable
class Templating(Protocol):
    """Options whose values hold templates: the loader checks each hole against ``input``."""

    def templates(self) -> Iterable[tuple[Loc, Template]]:
        """Every template of the options, with where it is in the declaration."""
        ...


@runtime_checkable
class FillsAbsent(Protocol):
    """Options that give some templates a meaning when a hole has no value (an optional
    argument not sent, without a default): an HTTP key left out, a SQL bind that is NULL, a
    process command element left out. Every other template whose hole may have no value is
    a load error (it would fail the call with ``template_error``)."""

    def fills_absent(self, loc: Loc, template: Template) -> bool:
        """The template at ``loc`` is rendered, or left out, even when a hole has no value."""
        ...


@dataclass(frozen=True, slots=True)
class AdapterSpec:
    """What the declaration loader checks a tool against, before any call."""

    name: str
    operations: Mapping[str, frozenset[str]]
    """Operation → the side_effect values a tool of that operation may declare."""
    probes: Mapping[str, frozenset[str]]
    """Probe name → required parameter names."""
    options: type[BaseModel] = NoOptions
    durable_reads: bool = False
    """True when even a read leaves something to clean up after a crash (a process):
    such reads are reserved like writes, so recovery can find them."""
    path_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Operation → path specs a tool of that operation must list in ``paths`` (key ``*``:
    every operation not listed)."""
    absent_hint: Mapping[str, str] = field(default_factory=dict)
    """Option key → how a declaration marks a template there that may go without a value
    (added to the load error of one that is not marked)."""
    stand_ins: Mapping[str, object] = field(default_factory=dict)
    """A neutral value for a required option key that has a fault, so that the checks of
    the other keys still run in the same pass (``sql: SELECT 1``); never loaded to serve."""
    referenced: frozenset[str] = frozenset()
    """Option keys that other keys name (a bind, a query): when one of them has a fault, the
    checks of the keys that name it are not run (they would report its absence)."""
