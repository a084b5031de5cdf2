"""Bounds on the JSON a caller sends: nesting depth, number of values, text that is Unicode.

Every later step walks a request's JSON (pydantic, the argument validators, the hashes, the
policy engine), some of them recursively and some in time that grows faster than the input.
:func:`check` runs first, in one iterative walk whose cost is linear in the input and capped by
``max_values``, so none of them meets a document deeper or larger than the bounds, a lone
surrogate that cannot be encoded (``"\\ud800"``) or a number JSON cannot carry (``1e400``
decodes to infinity).

A request that carries a tool call's ``arguments`` (a REST execution, plan or approval body,
MCP's ``tools/call`` params) is checked by :func:`check_call`, the one rule every door
applies: the arguments are bounded on their own (:func:`check_arguments`), and what surrounds
them apart, so that the same arguments pass or fail alike whatever envelope a door adds
(the body as a whole is bounded by bytes, ``max_body_bytes``, before it is parsed).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class JsonLimits:
    """How deep (objects and arrays inside each other; a flat object is 1) and how large (every
    object member and array item counts one) a document may be."""

    max_depth: int = 32
    max_values: int = 10_000


class Shape(NamedTuple):
    """What :func:`check` measured: values, the deepest nesting, characters of text.

    This and :class:`Checked` are made on every request: immutable as tuples, which cost
    half what a frozen dataclass does to make (one ``object.__setattr__`` call a field)."""

    values: int
    depth: int
    chars: int


class Bound(NamedTuple):
    """A document passed :func:`check` under ``limits`` with the shape ``shape``: what it
    holds is no deeper and no larger (an upper bound of any part's shape)."""

    limits: JsonLimits
    shape: Shape


class Checked(NamedTuple):
    """``value`` passed :func:`check` under ``limits``, or is part of a document that did
    (then it is no deeper and no larger than that document): ``shape`` is the checked
    document's, an upper bound of ``value``'s (of its arguments', when checked as a call by
    :func:`check_call`). What lets a later step skip checking the arguments again
    (``pipeline/normalise.py``), as long as it still holds that very object."""

    value: Any
    limits: JsonLimits
    shape: Shape

    @property
    def bound(self) -> Bound:
        return Bound(self.limits, self.shape)


class JsonLimitError(ValueError):
    """A document breaks a bound; ``code`` says which, the message says where."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


ARGUMENTS_LEVEL = 2
"""The level a call's arguments object nests at, whichever door carried it: its level in a
REST body (the body is level 1)."""


def check_call(body: Any, limits: JsonLimits, where: str = "body") -> Shape:
    """:func:`check` a request that may carry a call's ``arguments``: the arguments by
    :func:`check_arguments`, the rest of ``body`` (with no arguments) as a document of its
    own, each within ``limits``. Returns the arguments' shape (the body's when it has none)."""
    if type(body) is not dict or "arguments" not in body:
        return check(body, limits, where)
    check({key: value for key, value in body.items() if key != "arguments"}, limits, where)
    return check_arguments(body["arguments"], limits, f"{where}.arguments")


def check_arguments(arguments: Any, limits: JsonLimits, where: str = "arguments") -> Shape:
    """:func:`check` a call's arguments, the same way wherever they come from: at most
    ``max_values`` values inside them (the arguments object's own members counted), nested at
    most ``max_depth`` levels with the arguments object at ``ARGUMENTS_LEVEL``."""
    return check(arguments, limits, where, ARGUMENTS_LEVEL)


def check(value: Any, limits: JsonLimits, where: str = "body", start: int = 1) -> Shape:
    """Measure ``value`` (decoded JSON, nested at level ``start``) or raise :class:`JsonLimitError`
    at the first fault: ``json_too_deep``, ``json_too_many_values`` or ``malformed_json``.
    Stops as soon as a bound is passed, so the work is at most ``max_values`` steps."""
    values = depth = chars = 0
    # A node's path is built only for a message: (parent, key) links, rendered by _where.
    stack: list[tuple[Any, int, Any]] = [(value, start, where)]
    while stack:
        node, level, at = stack.pop()
        if type(node) is dict:
            members: Any = node.items()
        elif type(node) is list:
            members = enumerate(node)
        else:
            chars += _scalar(node, at)
            continue
        if level > limits.max_depth:
            raise JsonLimitError(
                "json_too_deep",
                f"{_where(at)} is nested deeper than {limits.max_depth} levels of objects and "
                "arrays",
            )
        depth = max(depth, level)
        values += len(node)
        if values > limits.max_values:
            raise JsonLimitError(
                "json_too_many_values",
                f"{where} has more than {limits.max_values} values (object members and "
                "array items, counted at every level)",
            )
        # _text inlined for the common case (ASCII): a call per string is most of the walk
        for key, member in members:
            if type(key) is str:
                chars += len(key) if key.isascii() else _text(key, at)
            kind = type(member)
            if kind is str:
                chars += len(member) if member.isascii() else _text(member, (at, key))
            elif kind is dict or kind is list:
                stack.append((member, level + 1, (at, key)))
            elif kind is float:
                _scalar(member, (at, key))
    return Shape(values, depth, chars)


def _where(at: Any) -> str:
    """The dotted path of a (parent, key) chain: ``body.arguments.path``."""
    keys: list[str] = []
    while type(at) is tuple:
        at, key = at
        keys.append(str(key))
    return ".".join([at, *reversed(keys)])


def _scalar(value: Any, at: Any) -> int:
    if type(value) is str:
        return _text(value, at)
    if type(value) is float and not math.isfinite(value):
        raise JsonLimitError(
            "malformed_json", f"{_where(at)} is a number out of range ({value!r} is not JSON)"
        )
    return 0


def _text(text: str, at: Any) -> int:
    if not text.isascii() and _SURROGATE.search(text) is not None:
        raise JsonLimitError(
            "malformed_json",
            f"{_where(at)} has a lone UTF-16 surrogate (such as \\ud800): not valid Unicode",
        )
    return len(text)


Measure = Callable[[Any, JsonLimits], Shape]
"""How a decoded body is checked: :func:`check`, or :func:`check_call` for a call's."""


def decode(raw: bytes | bytearray, limits: JsonLimits, measure: Measure = check) -> Any:
    """Parse a request body (UTF-8 JSON) and check it (``measure``); every fault is a
    :class:`JsonLimitError` (``malformed_json`` for text that is not JSON, an object with a
    repeated key, ``NaN`` or ``Infinity``)."""
    return decode_checked(raw, limits, measure).value


def decode_checked(raw: bytes | bytearray, limits: JsonLimits, measure: Measure = check) -> Checked:
    """:func:`decode`, and what it checked (``Checked.shape``: what ``measure`` returned)."""
    try:
        value = _DECODER.decode(raw.decode("utf-8"))
    except RecursionError as exc:  # the C parser recurses: about 1,000 levels
        raise JsonLimitError(
            "json_too_deep",
            f"the body is nested deeper than {limits.max_depth} levels of objects and arrays",
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise JsonLimitError("malformed_json", f"the body is not valid JSON: {exc}") from exc
    return Checked(value, limits, measure(value, limits))


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """Refuse an object that names one key twice: parsers disagree on which one wins (RFC
    8259 §4), so a gateway and the tool behind it could read different requests."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"the key {key!r} appears twice in one object")
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys, parse_constant=_no_constants)
