"""Rule coverage of the Rego tests: which rules of the decision no test reached.

The rules of the decision are every rule and function definition of the policy modules (not the
test modules) that ``data.toolgate.decision`` depends on, directly or through other rules: a
definition depends on the rules whose names (in its own package), full ``data.`` paths or import
aliases it mentions. The walk over-approximates (a local variable named like a rule counts as a
use of it), so a rule is never left out; it cannot see through ``data.toolgate[k]`` with a
computed ``k`` (the shipped policy never reads ``data.toolgate`` as a whole, docs/policies.md).

A definition was *reached* when some test got through its body: the engine's coverage report
(regorus ``get_coverage_report``, a line is covered once an expression on it was evaluated) marks
a line of its value (``:= value``, ``contains key``) covered, or, for a rule without a value
(``is_x if {...}``: regorus marks no line when it holds) or with an ``else`` (regorus marks no
``else := value`` line), a line of the last condition of one of its bodies: weaker, it says
that condition was evaluated, not that it held.
Every definition of ``deny_reasons`` is *evaluated* for every input, so "evaluated" would say
nothing; "got through" says which refusal no test ever triggered. Where those lines are not
marked at all (the engine marks no line), any covered line of the definition counts; a
definition on one line counts when that line is covered (value and conditions cannot be told
apart there).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.policy.loader import DECISION_RULE, ref_path
from gateway.policy.reads import data_reads


@dataclass(frozen=True)
class RuleDefinition:
    """One definition (head and bodies) of a rule or function of a policy module."""

    file: str
    line: int
    end_line: int
    path: str  # "data.<package>.<rule>"
    through: frozenset[int]
    """The lines whose coverage says a test got through the body (module docstring)."""

    def reached(self, covered: set[int], coverable: set[int]) -> bool:
        lines = self.through if self.through & coverable else self.lines()
        return bool(lines & covered) or not lines & coverable

    def lines(self) -> frozenset[int]:
        return frozenset(range(self.line, self.end_line + 1))


def decision_rules(tree: Sequence[Mapping[str, Any]]) -> list[RuleDefinition]:
    """The definitions ``data.toolgate.decision`` depends on (itself included), in file order.

    ``tree`` is the syntax tree of the policy modules (``loader.syntax_tree``, without tests).
    """
    definitions: list[tuple[RuleDefinition, set[str]]] = []
    for module in tree:
        definitions.extend(_definitions(module))
    paths = {d.path for d, _ in definitions}
    wanted, todo = {DECISION_RULE}, [DECISION_RULE]
    while todo:
        path = todo.pop()
        for definition, uses in definitions:
            if definition.path != path:
                continue
            for used in _resolve(uses, paths):
                if used not in wanted:
                    wanted.add(used)
                    todo.append(used)
    return [d for d, _ in definitions if d.path in wanted]


def unreached(
    definitions: Sequence[RuleDefinition], report: Mapping[str, Any]
) -> list[RuleDefinition]:
    """The definitions no line of which the coverage report (regorus JSON) marks evaluated."""
    by_file = {str(f.get("path")): f for f in report.get("files", [])}
    missed: list[RuleDefinition] = []
    for definition in definitions:
        entry = by_file.get(definition.file, {})
        covered = set(entry.get("covered") or [])
        coverable = covered | set(entry.get("not_covered") or [])
        if not definition.reached(covered, coverable):
            missed.append(definition)
    return missed


def _definitions(module: Mapping[str, Any]) -> Iterator[tuple[RuleDefinition, set[str]]]:
    """Each definition of the module with the dotted names it mentions, resolved to full
    ``data.`` paths where the module's package and imports say how."""
    file = str(module["source"]["file"])
    text = str(module["source"].get("contents", "")).encode("utf-8")
    package = ["data", *ref_path(module["ast"]["package"]["refr"])]
    aliases = _aliases(module)
    for rule in module["ast"]["rules"]:
        node = rule.get("Spec") or rule.get("Default")
        if not isinstance(node, dict):
            continue
        head = _head(rule)
        if head is None:
            continue
        line, end_line = _span_lines(node, text)
        path = ".".join([*package, *ref_path(head["refr"])])
        uses: set[str] = set()
        for name in _names(node):
            first, _, rest = name.partition(".")
            if first in aliases:
                uses.add(".".join(p for p in (aliases[first], rest) if p))
            elif first != "data":
                uses.add(".".join([*package, name]))
        uses.update(".".join(("data", *read.path)) for read in data_reads([module]) if read.path)
        through = frozenset(_through(rule, head, text))
        yield RuleDefinition(file, line, end_line, path, through), uses


def _span_lines(node: Mapping[str, Any], text: bytes) -> tuple[int, int]:
    """First and last line of a syntax node that carries a ``span`` (byte offsets)."""
    span = node["span"]
    line = int(span["line"])
    return line, max(line, text[: int(span["end"])].count(b"\n") + 1)


def _expr_lines(expr: Any, text: bytes) -> Iterator[int]:
    """The lines of an expression node (``{"Kind": {"span": ...}}``) or an ``assign``."""
    if not isinstance(expr, dict) or not expr:
        return
    node = expr if "span" in expr else next(iter(expr.values()))
    if isinstance(node, dict) and "span" in node:
        first, last = _span_lines(node, text)
        yield from range(first, last + 1)


def _through(rule: Mapping[str, Any], head: Mapping[str, Any], text: bytes) -> Iterator[int]:
    """The lines of the definition's values; and the last condition of each body when it has
    no value or an ``else`` (regorus marks no ``else := value`` line: a body whose last
    condition was evaluated gave the value or passed on to the ``else``)."""
    if "Default" in rule:
        yield from _expr_lines(rule["Default"].get("value"), text)
        return
    bodies = rule["Spec"].get("bodies") or []
    valued = False
    for key in ("key", "value", "assign"):
        if head.get(key):
            valued = True
            yield from _expr_lines(head[key], text)
    chained = any(body.get("assign") for body in bodies)
    for body in bodies:
        yield from _expr_lines(body.get("assign"), text)
    if valued and not chained:
        return
    for body in bodies:
        statements = (body.get("query") or {}).get("stmts") or []
        if statements:
            yield from _expr_lines(statements[-1], text)


def _head(rule: Mapping[str, Any]) -> dict[str, Any] | None:
    if "Default" in rule:
        node: dict[str, Any] = rule["Default"]
        return node
    head = rule["Spec"]["head"]
    if isinstance(head, dict) and len(head) == 1:
        found: dict[str, Any] = next(iter(head.values()))
        return found
    return None


def _aliases(module: Mapping[str, Any]) -> dict[str, str]:
    """The names a module's imports bind, each to the ``data.`` path it stands for."""
    text = str(module["source"].get("contents", "")).encode("utf-8")
    out: dict[str, str] = {}
    for imp in module["ast"].get("imports") or []:
        path = ref_path(imp["refr"])
        if path[0] != "data":
            continue
        alias = imp.get("as")
        if isinstance(alias, dict) and "start" in alias:
            name = text[alias["start"] : alias["end"]].decode("utf-8", "replace")
        else:
            name = path[-1]
        out[name] = ".".join(path)
    return out


def _names(node: Any) -> Iterator[str]:
    """Every variable, and every ``var.field.field`` chain, mentioned below ``node``."""
    if isinstance(node, list):
        for item in node:
            yield from _names(item)
        return
    if not isinstance(node, dict):
        return
    if len(node) == 1:
        kind, body = next(iter(node.items()))
        if kind == "Var" and isinstance(body, dict):
            yield str(body.get("value"))
            return
        if kind == "RefDot" and isinstance(body, dict):
            chain = _chain(node)
            if chain:
                yield chain
    for value in node.values():
        yield from _names(value)


def _chain(node: Any) -> str | None:
    kind, body = next(iter(node.items()))
    if kind == "Var":
        return str(body.get("value"))
    if kind == "RefDot":
        head = _chain(body["refr"])
        return None if head is None else f"{head}.{body['field'][-1]}"
    return None


def _resolve(uses: set[str], paths: set[str]) -> Iterator[str]:
    """The rule paths that a mentioned path may stand for: the rule itself, a rule below it
    (``data.toolgate.x`` with ``x.y := 1``) or one above it (``call.tool`` uses ``call``)."""
    for path in paths:
        for use in uses:
            if use == path or use.startswith(path + ".") or path.startswith(use + "."):
                yield path
                break
