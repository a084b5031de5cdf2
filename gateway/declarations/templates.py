"""Safe ``{dotted.path}`` interpolation for declarations: no eval, no shell.

A template is text with ``{expr}`` holes; ``{{`` and ``}}`` are literal braces. ``expr`` is
a dotted path into the call context (``arguments.path``, ``workspace.id``, ...) or one of a
few pure functions applied to a path: ``sha256(arguments.content)``, ``lower(...)``. Templates
are compiled when the declaration loads, so a typo is a load error, not a first-call error.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

FIELDS: Mapping[str, frozenset[str]] = {
    "arguments": frozenset(),  # the tool's own input schema says which (checked by the loader)
    "workspace": frozenset({"id", "root"}),
    "actor": frozenset({"user_id", "agent_id"}),
    "request": frozenset({"run_id", "turn_id", "call_id", "idempotency_key"}),
    "tool": frozenset({"name", "version"}),
    "execution": frozenset({"id"}),
}
"""Every root of the template context and its fields (``pipeline.context.template_context``
fills exactly these); every field is text, so nothing lies below it."""
ROOTS = frozenset(FIELDS)

_FUNCTIONS: dict[str, Callable[[Any], str]] = {
    "sha256": lambda v: hashlib.sha256(_text(v).encode("utf-8")).hexdigest(),
    "lower": lambda v: _text(v).lower(),
    "upper": lambda v: _text(v).upper(),
    "json": lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")),
}
_EXPR = re.compile(r"^(?:(?P<fn>[a-z0-9_]+)\((?P<inner>[^()]*)\)|(?P<path>[^()]*))$")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z0-9_]+|\*))*$")


class TemplateError(ValueError):
    """A template that cannot compile, or a hole that has no value at render time."""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class _Hole:
    path: tuple[str, ...]
    fn: str | None


@dataclass(frozen=True, slots=True)
class Template:
    """A compiled template; ``render(context)`` fills it."""

    source: str
    parts: tuple[str | _Hole, ...]

    @property
    def references(self) -> tuple[tuple[str, ...], ...]:
        return tuple(p.path for p in self.parts if isinstance(p, _Hole))

    def render_all(self, context: Mapping[str, Any]) -> list[str]:
        """Every rendering of a template whose holes may contain one ``*`` (list items)."""
        wild = next((ref for ref in self.references if "*" in ref), None)
        if wild is None:
            return [self.render(context)]
        star = wild.index("*")
        items = lookup(context, wild[:star])
        if not isinstance(items, list | tuple):
            raise TemplateError(f"'{'.'.join(wild[:star])}' is not a list")
        out = []
        for i in range(len(items)):
            concrete = Template(self.source, tuple(_bind(p, wild, star, i) for p in self.parts))
            out.append(concrete.render(context))
        return out

    def render(self, context: Mapping[str, Any]) -> str:
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
                continue
            value = lookup(context, part.path)
            out.append(_FUNCTIONS[part.fn](value) if part.fn else _text(value))
        return "".join(out)


def _bind(part: str | _Hole, wild: tuple[str, ...], star: int, index: int) -> str | _Hole:
    if isinstance(part, _Hole) and part.path[: star + 1] == wild[: star + 1]:
        path = (*part.path[:star], str(index), *part.path[star + 1 :])
        return _Hole(path, part.fn)
    return part


def lookup(context: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    """Follow ``path`` through nested mappings; a missing key is a TemplateError."""
    value: Any = context
    for i, key in enumerate(path):
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list | tuple) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise TemplateError(f"'{'.'.join(path[: i + 1])}' has no value")
    return value


def compile_template(source: str) -> Template:
    """Compile ``source``; raises TemplateError naming the fault."""
    parts: list[str | _Hole] = []
    buf: list[str] = []
    i = 0
    while i < len(source):
        ch = source[i]
        if source.startswith("{{", i) or source.startswith("}}", i):
            buf.append(ch)
            i += 2
            continue
        if ch == "}":
            raise TemplateError(f"unbalanced '}}' at position {i} in {source!r}")
        if ch != "{":
            buf.append(ch)
            i += 1
            continue
        end = source.find("}", i)
        if end < 0:
            raise TemplateError(f"unclosed '{{' at position {i} in {source!r}")
        if buf:
            parts.append("".join(buf))
            buf = []
        parts.append(_compile_hole(source[i + 1 : end].strip(), source))
        i = end + 1
    if buf:
        parts.append("".join(buf))
    return Template(source, tuple(parts))


def _compile_hole(expr: str, source: str) -> _Hole:
    match = _EXPR.match(expr)
    fn = match.group("fn") if match else None
    path = (match.group("inner") if fn else match.group("path")) if match else ""
    path = (path or "").strip()
    if fn is not None and fn not in _FUNCTIONS:
        known = ", ".join(sorted(_FUNCTIONS))
        raise TemplateError(f"unknown function {fn!r} in {source!r} (known: {known})")
    if not _PATH.match(path):
        raise TemplateError(f"{{{expr}}} in {source!r} is not a dotted path like arguments.path")
    parts = tuple(path.split("."))
    if parts[0] not in ROOTS:
        roots = ", ".join(sorted(ROOTS))
        raise TemplateError(f"{{{expr}}} in {source!r} must start with one of: {roots}")
    return _Hole(parts, fn)
