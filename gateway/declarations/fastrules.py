"""The rules of the compiled fast path (``fastvalid``): each builds a predicate or a check
for one cerberus rule value, refusing a rule value of a shape it does not model."""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any


class Unsupported(Exception):
    """The schema uses a rule, or a rule value, that the fast path does not model."""


class Unsure(Exception):
    """The fast path does not accept the document: cerberus decides."""


SIZED = frozenset({str, list, dict})  # Sized and Iterable among _KINDS


# --- rules --------------------------------------------------------------------------------
# Each test mirrors the expression of cerberus's (or JsonValidator's) rule method, so that
# its result, and any exception, is the same for every value the fast path lets through.


def allowed(allowed: Any, where: str) -> Callable[[Any], bool]:
    if isinstance(allowed, str) or not isinstance(allowed, list | tuple | set | frozenset):
        raise Unsupported(f"{where}: allowed {allowed!r}")

    def test(value: Any) -> bool:
        kind = type(value)
        if kind is list or kind is dict:  # each member (or key) must be allowed
            return all(member in allowed for member in value)
        return value in allowed

    return test


def forbidden(forbidden: Any, where: str) -> Callable[[Any], bool]:
    if not isinstance(forbidden, list):
        raise Unsupported(f"{where}: forbidden {forbidden!r}")
    try:
        banned = set(forbidden)  # cerberus intersects sets for a list value
    except TypeError as exc:
        raise Unsupported(f"{where}: forbidden {forbidden!r}") from exc

    def test(value: Any) -> bool:
        if type(value) is list:
            return not any(member in banned for member in value)
        return value not in forbidden

    return test


def length(value: Any, rule: str, where: str) -> int:
    if not isinstance(value, int):
        raise Unsupported(f"{where}: {rule} {value!r}")
    return value


def minlength(bound: int) -> Callable[[Any], bool]:
    return lambda value: type(value) not in SIZED or not len(value) < bound


def maxlength(bound: int) -> Callable[[Any], bool]:
    return lambda value: type(value) not in SIZED or not len(value) > bound


def regex(pattern: Any, where: str) -> Callable[[Any], bool]:
    if not isinstance(pattern, str):
        raise Unsupported(f"{where}: regex {pattern!r}")
    try:
        fullmatch = re.compile(pattern).fullmatch  # JsonValidator: re.fullmatch(pattern, v)
    except re.error as exc:
        raise Unsupported(f"{where}: regex {pattern!r} does not compile") from exc
    return lambda value: type(value) is not str or fullmatch(value) is not None


def min_rule(bound: Any) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        try:
            return not value < bound
        except TypeError:  # cerberus ignores values it cannot compare
            return True

    return test


def max_rule(bound: Any) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        try:
            return not value > bound
        except TypeError:
            return True

    return test


def names(value: Any) -> bool:
    """Bare field names: no ``^`` (document root) or ``.`` (path) lookups."""
    return isinstance(value, str) and "." not in value and not value.startswith("^")


def dependencies(name: Any, deps: Any, where: str) -> Callable[[dict[Any, Any]], None]:
    """cerberus's ``dependencies``, checked on the normalised dict when ``name`` is in it."""
    if isinstance(deps, str):
        deps = [deps]
    if isinstance(deps, list) and all(names(d) for d in deps):
        wanted = tuple(deps)

        def fields(out: dict[Any, Any]) -> None:
            if name in out:
                for dep in wanted:
                    if dep not in out:
                        raise Unsure

        return fields
    if isinstance(deps, Mapping) and all(names(d) for d in deps):
        values = tuple(
            (dep, v if isinstance(v, Sequence) and not isinstance(v, str) else [v])
            for dep, v in deps.items()
        )

        def field_values(out: dict[Any, Any]) -> None:
            if name in out:
                for dep, allowed in values:
                    if out.get(dep) not in allowed:  # a missing field counts as None
                        raise Unsure

        return field_values
    raise Unsupported(f"{where}: dependencies {deps!r}")


def excluded(value: Any, where: str) -> tuple[Any, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise Unsupported(f"{where}: excludes {value!r}")


def required_with_excludes(
    required: list[Any],
    excludes: list[tuple[Any, tuple[Any, ...], bool]],
    names: frozenset[Hashable],
) -> Callable[[dict[Any, Any]], None]:
    """Required fields, as cerberus checks them when ``excludes`` is used.

    A present field with ``excludes`` refuses the excluded fields; if it is required, it
    and the excluded fields it names are no longer required, but one of them must have a
    value (not None).
    """

    def check(out: dict[Any, Any]) -> None:
        unrequired: set[Any] = set()
        for name, excluded, is_required in excludes:
            if name in out:
                for other in excluded:
                    if other in out:
                        raise Unsure
                if is_required:
                    unrequired.add(name)
                    unrequired.update(other for other in excluded if other in names)
        for name in required:
            if name not in out and name not in unrequired:
                raise Unsure
        if unrequired and all(out.get(name) is None for name in unrequired):
            raise Unsure

    return check
