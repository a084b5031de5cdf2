"""Load YAML while remembering where each key stands, for errors that name the line.

``load_yaml(path)`` returns the data (dicts, lists, scalars) and a ``Lines`` index that maps a
key path (a tuple of keys and list indexes, as pydantic reports ``loc``) to its 1-based line.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

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


def _index(node: yaml.Node, loc: Loc, out: dict[Loc, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            out.setdefault((*loc, key), key_node.start_mark.line + 1)
            _index(value_node, (*loc, key), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.setdefault((*loc, i), item.start_mark.line + 1)
            _index(item, (*loc, i), out)


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
        _index(node, (), by_loc)
    return data, Lines(name, by_loc)


def load_yaml(path: Path) -> tuple[Any, Lines]:
    """Read and parse one YAML file."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}:1: cannot read: {exc}") from exc
    return parse_yaml(text, str(path))


def pydantic_problems(exc: Any, lines: Lines) -> list[str]:
    """Turn a pydantic ValidationError into messages naming file, line and key."""
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(part for part in err["loc"] if not _is_union_tag(part))
        msg = list_wording(err["msg"])
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif err["type"] == "value_error":
            msg = msg.removeprefix("Value error, ")  # pydantic's, not the message's
        problems.append(f"{lines.where(loc)}: {msg}")
    return problems


def list_wording(message: str) -> str:
    """pydantic's message in the words of YAML and JSON: a ``tuple`` field is a list there
    ("Input should be a valid tuple" → "... a valid list")."""
    return message.replace("valid tuple", "valid list").replace("Tuple should", "List should")


def _is_union_tag(part: Any) -> bool:
    # pydantic puts the tag of a tagged union or a function name into loc; they are not keys.
    return isinstance(part, str) and (part.startswith("function-") or "[" in part)
