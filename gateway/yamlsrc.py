"""Load YAML while remembering where each key stands, for errors that name the line.

``load_yaml(path)`` returns the data (dicts, lists, scalars) and a ``Lines`` index that maps a
key path (a tuple of keys and list indexes, as pydantic reports ``loc``) to its 1-based line.
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from gateway.errors import ConfigError

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Lines:
    """Line numbers of the keys of one YAML document."""

    file: str
    by_loc: dict[Loc, int]

    def line(self, loc: Iterable[str | int]) -> int:
        """The line of ``loc`` or of its nearest ancestor that has one (1 for the root)."""
        key = tuple(loc)
        while key:
            if key in self.by_loc:
                return self.by_loc[key]
            key = key[:-1]
        return 1

    def where(self, loc: Iterable[str | int]) -> str:
        loc = tuple(loc)
        dotted = ".".join(str(part) for part in loc) or "(document)"
        return f"{self.file}:{self.line(loc)}: {dotted}"


MAX_NODES = 1_000_000
"""The most values one document may hold with its aliases expanded. An alias costs nothing
to parse, but whatever walks the data (this index, validation, the policy engine's JSON)
walks each use of it: nine aliases of nine aliases, nine levels deep, are 9^9 values."""


class _TooLarge(Exception):
    """A document holds more than ``MAX_NODES`` values, its aliases expanded."""


def _index(node: yaml.Node, loc: Loc, out: dict[Loc, int], budget: list[int]) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out.setdefault((*loc, key), key_node.start_mark.line + 1)
            _index(value_node, (*loc, key), out, budget)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.setdefault((*loc, i), item.start_mark.line + 1)
            _index(item, (*loc, i), out, budget)


_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first on line {seen[key]})",
                    key_node.start_mark,
                )
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, name: str) -> tuple[Any, Lines]:
    """Parse ``text``; a YAML error becomes a ConfigError naming ``name`` and the line."""
    loader = _UniqueKeyLoader(text)
    try:
        # One parse (libyaml when present): the node tree gives the lines, then the data.
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ConfigError(f"{name}:{line}: YAML error: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{name}:1: YAML error: {exc}") from exc
    except TypeError as exc:  # e.g. a mapping used as a key: unhashable
        raise ConfigError(f"{name}:1: YAML error: a key must be a scalar ({exc})") from exc
    finally:
        loader.dispose()
    by_loc: dict[Loc, int] = {}
    if node is not None:
        try:
            _index(node, (), by_loc, [MAX_NODES])
        except _TooLarge:
            raise ConfigError(
                f"{name}:1: YAML error: more than {MAX_NODES:,} values with its aliases"
                " expanded (an alias of aliases?)"
            ) from None
    return data, Lines(name, by_loc)


def load_yaml(path: Path) -> tuple[Any, Lines]:
    """Read and parse one YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}:1: cannot read: {exc}") from exc
    return parse_yaml(text, str(path))


def pydantic_problems(
    exc: Any,
    lines: Lines,
    models: Sequence[type[BaseModel]] = (),
    *,
    echo: bool = False,
    hidden: frozenset[str] = frozenset(),
) -> list[str]:
    """Turn a pydantic ValidationError into messages naming file, line and key, and what
    was expected: an unknown key gets the closest known key of ``models`` (those the
    document was validated against, at the top) or the list of them; a value not among the
    allowed ones gets the closest allowed one. ``echo``: say what was given too (never for
    a document that can hold secrets); ``hidden``: fields that are no key of the document."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if not _is_union_tag(part))
        msg = list_wording(err["msg"])
        if err["type"] == "extra_forbidden":
            msg = _unknown_key(str(loc[-1]), keys_at(models, loc[:-1], hidden))
        elif err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # pydantic's, not the message's
        elif err["type"] in ("literal_error", "enum"):
            msg += _given(err["input"], re.findall(r"'([^']*)'", err["ctx"]["expected"]), echo)
        elif err["type"] == "string_pattern_mismatch" and (
            choice := _CHOICE.match(err["ctx"]["pattern"])
        ):  # a pattern that is a list of words: say the words
            words = choice.group(1).split("|")
            msg = f"should be one of {', '.join(words)}" + _given(err["input"], words, echo)
        elif echo and err["type"] != "missing" and _is_scalar(err["input"]):
            msg += f" (got {_short(err['input'])})"
        problems.append(f"{lines.where(loc)}: {msg}")
    return problems


_CHOICE = re.compile(r"^\^\(([\w-]+(?:\|[\w-]+)+)\)\$$")
"""A pattern ``^(a|b|c)$``: one of a few words."""


def closest(word: str, known: Iterable[str]) -> str | None:
    """The known name nearest a misspelt one (difflib), if one is near enough."""
    match = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return match[0] if match else None


def _unknown_key(key: str, known: list[str]) -> str:
    near = closest(key, known)
    if near is not None:
        return f"unknown key (did you mean {near!r}?)"
    return f"unknown key (known: {', '.join(known)})" if known else "unknown key"


def _given(value: Any, allowed: list[str], echo: bool) -> str:
    near = closest(value, allowed) if isinstance(value, str) else None
    said = f"got {_short(value)}" if echo and _is_scalar(value) else ""
    hint = f"did you mean {near!r}?" if near is not None else ""
    text = "; ".join(part for part in (said, hint) if part)
    return f" ({text})" if text else ""


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def keys_at(
    models: Sequence[type[BaseModel]], loc: tuple[str | int, ...], hidden: frozenset[str]
) -> list[str]:
    """The keys the models accept at ``loc`` (a list index or a mapping's own key in
    ``loc`` is passed over), sorted; ``hidden`` left out at the top."""
    current = list(models)
    for part in loc:
        fields = [
            f for m in current for name, f in m.model_fields.items() if part in (f.alias, name)
        ]
        if fields:
            current = [m for f in fields for m in _models_in(f.annotation)]
    names = {f.alias or name for m in current for name, f in m.model_fields.items()}
    return sorted(names - hidden if not loc else names)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def list_wording(message: str) -> str:
    """pydantic's message in the words of YAML and JSON: a ``tuple`` field is a list there
    ("Input should be a valid tuple" → "... a valid list")."""
    return message.replace("valid tuple", "valid list").replace("Tuple should", "List should")


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the tag of a tagged union or a function name into loc; they are not keys.
    return isinstance(part, str) and (part.startswith("function-") or "[" in part)
