"""Publish a cerberus ``input:`` schema as JSON Schema (draft 2020-12).

A tool declaration's cerberus schema is its only input contract; ``GET /v1/tools/{name}``
publishes it as JSON Schema, ready to paste into an LLM tool definition. The JSON Schema says
what a caller may send; it is exact for the rules that have an equivalent, when the gateway
validates with :class:`JsonValidator`. Decisions:

* **Types.** A stock ``cerberus.Validator`` takes ``true`` as an ``integer`` or ``float`` (bool
  is an int in Python); JSON does not. :class:`JsonValidator` excludes bools, so both agree.
  One gap is left: JSON Schema counts ``1.0`` as an integer, cerberus sees a float and rejects
  it. ``datetime``/``date`` are published as strings with a ``format``: JSON carries no dates,
  so such a field needs ``coerce`` (flagged otherwise).
* **regex** is published as ``^(?:...)$``. :class:`JsonValidator` matches the whole string;
  stock cerberus appends ``$`` and uses ``re.match``, so ``a|b`` accepts ``"abc"`` there.
* **Normalisation** (``coerce``, ``rename``, ``default_setter``, ``purge_unknown``...) is
  described by its result: the type after coercion, unknown fields forbidden. Such rules, and
  every rule with no JSON Schema equivalent for the field's type, are never dropped silently:
  they are listed under ``x-toolgate-unmapped`` (``path``, ``rule``, ``value``, ``note``) and,
  on the property they belong to, as ``x-cerberus-<rule>``.
* A field with a ``default`` is not ``required``: normalisation fills it in.
"""

from __future__ import annotations

import copy
import datetime as dt
import math
import re
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import cerberus

from gateway.declarations.validator import JsonValidator
from gateway.yamlsrc import closest

JSONSchema = dict[str, Any]
UNMAPPED_KEY = "x-toolgate-unmapped"


def cerberus_to_json_schema(
    schema: Mapping[str, Any],
    *,
    allow_unknown: bool | Mapping[str, Any] = False,
    require_all: bool = False,
    purge_unknown: bool = False,
    purge_readonly: bool = False,
) -> JSONSchema:
    """Convert a cerberus schema (already accepted by cerberus) into a JSON Schema object.

    The keyword arguments mirror the ``cerberus.Validator`` options the gateway validates
    with. Rules without an equivalent are listed under ``x-toolgate-unmapped``.
    """
    return _convert(schema, _Options(allow_unknown, require_all, purge_unknown, purge_readonly))[0]


def unmapped_rules(schema: Mapping[str, Any], **options: Any) -> list[dict[str, Any]]:
    """The rules of ``schema`` that its JSON Schema cannot express (empty when none)."""
    return list(cerberus_to_json_schema(schema, **options).get(UNMAPPED_KEY, []))


def validate_cerberus_schema(
    schema: Any, where: str, *, validator_cls: type[Any] = JsonValidator
) -> list[str]:
    """Problems with ``schema`` as a tool's ``input:``, each prefixed by ``where``.

    Reports what cerberus rejects (unknown rules and types, wrong rule values, names of
    coercers the validator lacks), deprecated rule names, and regexes that do not compile.
    An empty list means the schema can be used and published.
    """
    if not isinstance(schema, Mapping):
        return [f"{where}: must be a mapping of field names to rules, not {type(schema).__name__}"]
    problems = [
        f"{where}: {_join('', name)}: rules must be a mapping, not {type(rules).__name__}"
        for name, rules in schema.items()
        if not isinstance(rules, Mapping | str)
    ]
    if problems:
        return problems
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            validator_cls(copy.deepcopy(dict(schema)))
        except cerberus.SchemaError as exc:
            return [f"{where}: {line}" for line in _error_lines(exc.args[0] if exc.args else exc)]
        except (TypeError, ValueError, AttributeError) as exc:
            return [f"{where}: cerberus cannot read this schema: {exc}"]
    problems = [f"{where}: {w.message}" for w in caught]
    return problems + [f"{where}: {p}" for p in _convert(schema, _Options())[1]]


def _error_lines(errors: Any, path: str = "") -> list[str]:
    """Flatten cerberus's nested ``SchemaError`` payload into ``path: message`` lines.

    The alternatives cerberus tried for a rule (``oneof definition 0`` ...) are folded into
    the line of the message they explain.
    """
    if isinstance(errors, Mapping):
        return [
            line for key, value in errors.items() for line in _error_lines(value, _join(path, key))
        ]
    if not isinstance(errors, list):
        message = _explain(path, str(errors))
        return [f"{path}: {message}" if path else message]
    lines: list[str] = []
    for item in errors:
        if isinstance(item, Mapping) and item and all(" definition " in str(k) for k in item):
            detail = "; ".join(line for alt in item.values() for line in _error_lines(alt))
            lines.append(f"{lines.pop()} ({detail})" if lines else f"{path}: ({detail})")
        else:
            lines.extend(_error_lines(item, path))
    return lines


def _explain(path: str, message: str) -> str:
    """cerberus's words for a misspelt type or rule, with what it knows and the closest."""
    if message.startswith("Unsupported types: "):
        names = [n.strip() for n in message.removeprefix("Unsupported types: ").split(",")]
        return "; ".join(_unknown("type", name, JsonValidator.types) for name in names)
    if message == "unknown rule":
        return _unknown("rule", path.rsplit(".", 1)[-1], JsonValidator.rules)
    return message


def _unknown(what: str, name: str, known: Iterable[str]) -> str:
    near = closest(name, sorted(known))
    if near is not None:
        return f"unknown {what} {name!r} (did you mean {near!r}?)"
    return f"unknown {what} {name!r} (known: {', '.join(sorted(known))})"


# --- conversion ---------------------------------------------------------------------------

_TYPE_SCHEMAS: dict[str, JSONSchema] = {
    "string": {"type": "string"},
    "integer": {"type": "integer"},
    "float": {"type": "number"},
    "number": {"type": "number"},
    "boolean": {"type": "boolean"},
    "dict": {"type": "object"},
    "list": {"type": "array"},
    "container": {"type": ["array", "object"]},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
}
# What a value of each cerberus type is, for rules that depend on it ("datetime" is a kind of
# its own: after coercion it is not a string, so string rules do not apply to it).
_TYPE_KINDS: dict[str, frozenset[str]] = {
    "string": frozenset({"string"}),
    "integer": frozenset({"integer"}),
    "float": frozenset({"number"}),
    "number": frozenset({"number"}),
    "boolean": frozenset({"boolean"}),
    "dict": frozenset({"object"}),
    "list": frozenset({"array"}),
    "container": frozenset({"array", "object"}),
    "datetime": frozenset({"datetime"}),
    "date": frozenset({"datetime"}),
}
_ANY_KIND = frozenset({"string", "integer", "number", "boolean", "object", "array"})
_SCALAR_TYPES = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "datetime": "string",
}
_LENGTHS = {
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}
_EMPTY_VALUES: dict[str, Any] = {"string": "", "array": [], "object": {}}

_OF_RULES = ("allof", "anyof", "noneof", "oneof")
_RENAMED_RULES = {"keyschema": "keysrules", "valueschema": "valuesrules", "validator": "check_with"}
# Rules that cerberus skips for an empty value; they are published as one group (see _sized).
_SIZED_RULES = ("minlength", "maxlength", "allowed", "forbidden", "regex", "items")
_OTHER_RULES = ("min", "max", "contains", "schema", "keysrules", "valuesrules", *_OF_RULES)
_MAPPED_RULES = frozenset(
    {
        "type",
        "required",
        "nullable",
        "empty",
        "readonly",
        "meta",
        "default",
        "allow_unknown",
        "require_all",
        *_SIZED_RULES,
        *_OTHER_RULES,
    }
)
_UNMAPPED_NOTES = {
    "coerce": "the gateway coerces the value before validating it: the schema shows the type "
    "after coercion, and values that coerce to it are accepted too",
    "rename": "the field is renamed during normalisation",
    "rename_handler": "the field is renamed during normalisation",
    "check_with": "checked by gateway code, not expressible in JSON Schema",
    "dependencies": "needs other fields (or values of them) to be present",
    "excludes": "cannot be sent together with the listed fields; not listed as required",
    "purge_unknown": "unknown fields are removed, not rejected; the schema still forbids them",
    "default_setter": "the default is computed by the gateway; not listed as required",
}
_CUSTOM_RULE = "a custom rule of the gateway's validator, not expressible in JSON Schema"
_PY_ONLY_REGEX = re.compile(r"\(\?P[<=>]|\(\?[aiLmsux]+[):-]|\\[AZ]|\(\?#")
_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")
_NULL_REJECTING = frozenset({"type", "enum", "const", "not", "allOf", "anyOf", "oneOf", "if"})
# Keywords that change each other's meaning: parts using them must not be merged (see _conjoin).
_KEYWORD_GROUPS = (
    frozenset({"properties", "patternProperties", "additionalProperties"}),
    frozenset({"prefixItems", "items"}),
    frozenset({"contains", "minContains", "maxContains"}),
)


@dataclass(frozen=True)
class _Options:
    allow_unknown: bool | Mapping[str, Any] = False
    require_all: bool = False
    purge_unknown: bool = False
    purge_readonly: bool = False


@dataclass(frozen=True)
class _Scope:
    """Validator settings a mapping level inherits from its parent."""

    allow_unknown: Any
    require_all: bool
    purge_readonly: bool

    def child(self, rules: Mapping[str, Any]) -> _Scope:
        return _Scope(
            rules.get("allow_unknown", self.allow_unknown),
            bool(rules.get("require_all", self.require_all)),
            self.purge_readonly,
        )


@dataclass(frozen=True)
class _Field:
    rules: Mapping[str, Any]
    kinds: frozenset[str]
    path: str
    scope: _Scope


def _convert(schema: Mapping[str, Any], options: _Options) -> tuple[JSONSchema, list[str]]:
    converter = _Converter()
    scope = _Scope(options.allow_unknown, options.require_all, options.purge_readonly)
    out: JSONSchema = {"type": "object", **converter.object_keywords(schema, "", scope, top=True)}
    if options.purge_unknown and not options.allow_unknown:
        converter.note("", "purge_unknown", True, _UNMAPPED_NOTES["purge_unknown"])
    if converter.unmapped:
        out[UNMAPPED_KEY] = converter.unmapped
    return out, converter.problems


class _Converter:
    """Walks one schema; collects unmapped rules and (for load-time checks) problems."""

    def __init__(self) -> None:
        self.unmapped: list[dict[str, Any]] = []
        self.problems: list[str] = []

    def note(self, path: str, rule: str, value: Any, why: str) -> None:
        self.unmapped.append({"path": path, "rule": rule, "value": _jsonable(value), "note": why})

    def object_keywords(
        self, fields: Mapping[Any, Any], path: str, scope: _Scope, *, top: bool = False
    ) -> JSONSchema:
        properties, required = {}, []
        for name, rules in fields.items():
            properties[str(name)] = self.field(rules, _join(path, name), scope)
            if isinstance(rules, Mapping) and _is_required(_expand(rules), scope):
                required.append(str(name))
        out: JSONSchema = {"properties": properties}
        if required or top:
            out["required"] = sorted(required)
        out["additionalProperties"] = self._unknown(scope, path)
        return out

    def _unknown(self, scope: _Scope, path: str) -> Any:
        if isinstance(scope.allow_unknown, Mapping):
            return self.field(scope.allow_unknown, _join(path, "*"), scope)
        if isinstance(scope.allow_unknown, str):
            self.note(_join(path, "*"), "allow_unknown", scope.allow_unknown, "a registry entry")
            return True
        return bool(scope.allow_unknown)

    def field(self, raw: Any, path: str, scope: _Scope, *, nulls: bool = True) -> JSONSchema:
        """The JSON Schema of one field (or list item, or key, or value) from its rules."""
        if not isinstance(raw, Mapping):
            self.note(path, "rules", raw, "refers to a rules-set registry entry; not resolved")
            return {}
        rules = _expand(raw)
        if rules.get("readonly"):
            return self._readonly(rules, path, scope)
        f = _Field(rules, _kinds(rules.get("type")), path, scope)
        type_part = self._type(f)
        schema = _conjoin([type_part, self._sized(f), *self._parts(f, _OTHER_RULES)])
        if nulls:
            schema = _with_null(schema, bool(rules.get("nullable")), typed=bool(type_part))
        return {**_annotations(rules), **schema, **self._leftovers(f)}

    def _readonly(self, rules: Mapping[str, Any], path: str, scope: _Scope) -> JSONSchema:
        if scope.purge_readonly:
            self.note(path, "readonly", True, "removed from the input if sent")
            return {**_annotations(rules), "readOnly": True}
        return {**_annotations(rules), "readOnly": True, "not": {}}

    def _type(self, f: _Field) -> JSONSchema:
        names = _type_names(f.rules.get("type"))
        if names is None:
            return {}
        for name in names:
            if name not in _TYPE_SCHEMAS:
                self.note(f.path, "type", name, "no JSON value has this type")
        if {"datetime", "date"} & set(names) and "coerce" not in f.rules:
            self.note(f.path, "type", f.rules["type"], "JSON has no dates: needs coerce")
        return _union([_TYPE_SCHEMAS[n] for n in names if n in _TYPE_SCHEMAS])

    def _sized(self, f: _Field) -> JSONSchema:
        parts = self._parts(f, _SIZED_RULES)
        if f.rules.get("empty") is False and "minlength" not in f.rules:
            parts.append(self._checked(f, "empty", False, lambda: _lengths(f.kinds, 0, 1)))
        sized = _conjoin(parts)
        empties = [v for kind, v in _EMPTY_VALUES.items() if kind in f.kinds]
        if f.rules.get("empty") is True and sized and empties:
            # cerberus skips these rules for an empty value when ``empty: true`` is explicit.
            return {"anyOf": [{"enum": empties}, sized]}
        return sized

    def _parts(self, f: _Field, rules: Iterable[str]) -> list[JSONSchema]:
        return [
            self._checked(f, rule, f.rules[rule], lambda r=rule: getattr(self, f"_rule_{r}")(f))
            for rule in rules
            if rule in f.rules
        ]

    def _checked(self, f: _Field, rule: str, value: Any, build: Any) -> JSONSchema:
        """Run ``build``; a rule that yields nothing (and noted nothing itself) is noted."""
        before = len(self.unmapped)
        part: JSONSchema = build()
        if not part and len(self.unmapped) == before:
            self.note(f.path, rule, value, f"no JSON Schema equivalent for type {_type_text(f)}")
        return part

    def _leftovers(self, f: _Field) -> JSONSchema:
        extras: JSONSchema = {}
        for rule, value in f.rules.items():
            if rule not in _MAPPED_RULES:
                self.note(f.path, rule, value, _UNMAPPED_NOTES.get(rule, _CUSTOM_RULE))
                extras[f"x-cerberus-{rule}"] = _jsonable(value)
        return extras

    # One method per mapped rule: each returns a (possibly empty) part of the field's schema.

    def _rule_minlength(self, f: _Field) -> JSONSchema:
        floor = 1 if f.rules.get("empty") is False else 0
        return _lengths(f.kinds, 0, max(f.rules["minlength"], floor))

    def _rule_maxlength(self, f: _Field) -> JSONSchema:
        return _lengths(f.kinds, 1, f.rules["maxlength"])

    def _rule_allowed(self, f: _Field) -> JSONSchema:
        enum = _jsonable(list(f.rules["allowed"]))
        # For a list (or dict) cerberus checks each member (or key), not the value itself.
        return _by_kind(
            f.kinds, {"enum": enum}, {"items": {"enum": enum}}, {"propertyNames": {"enum": enum}}
        )

    def _rule_forbidden(self, f: _Field) -> JSONSchema:
        banned = {"not": {"enum": _jsonable(list(f.rules["forbidden"]))}}
        return _by_kind(f.kinds, banned, {"items": banned}, banned)

    def _rule_regex(self, f: _Field) -> JSONSchema:
        pattern = f.rules["regex"]
        try:
            re.compile(pattern)
        except re.error as exc:
            self.problems.append(f"{f.path}: regex {pattern!r} does not compile: {exc}")
        if "string" not in f.kinds:
            return {}
        if _PY_ONLY_REGEX.search(pattern):
            self.note(f.path, "regex", pattern, "Python-only syntax: other engines may differ")
        return {"pattern": _anchored(pattern)}

    def _rule_items(self, f: _Field) -> JSONSchema:
        items = f.rules["items"]
        if "array" not in f.kinds:
            return {}
        prefix = [self.field(r, f"{f.path}[{i}]", f.scope) for i, r in enumerate(items)]
        return {"prefixItems": prefix, "minItems": len(items), "maxItems": len(items)}

    def _rule_min(self, f: _Field) -> JSONSchema:
        return _bound(f, "min", "minimum")

    def _rule_max(self, f: _Field) -> JSONSchema:
        return _bound(f, "max", "maximum")

    def _rule_contains(self, f: _Field) -> JSONSchema:
        value = f.rules["contains"]
        wanted = _jsonable(
            [value]
            if isinstance(value, str | bytes) or not isinstance(value, Iterable)
            else list(value)
        )
        if "string" in f.kinds:
            self.note(f.path, "contains", value, "on a string cerberus checks characters")
        if not wanted:
            return {}
        contains = [{"contains": {"const": v}} for v in wanted]
        array = contains[0] if len(contains) == 1 else {"allOf": contains}
        keys = {"required": wanted} if all(isinstance(v, str) for v in wanted) else {}
        return _by_kind(f.kinds - {"string"}, {}, array, keys)

    def _rule_schema(self, f: _Field) -> JSONSchema:
        value = f.rules["schema"]
        if not isinstance(value, Mapping):
            self.note(f.path, "schema", value, "refers to a schema registry entry; not resolved")
            return {}
        if _is_fields_mapping(value, f.kinds):
            return self.object_keywords(value, f.path, f.scope.child(f.rules))
        if "array" not in f.kinds:
            return {}
        return {"items": self.field(value, f"{f.path}[]", f.scope)}

    def _rule_keysrules(self, f: _Field) -> JSONSchema:
        if "object" not in f.kinds:
            return {}
        keys = self.field(f.rules["keysrules"], f"{f.path}.<key>", f.scope, nulls=False)
        return {"propertyNames": keys}

    def _rule_valuesrules(self, f: _Field) -> JSONSchema:
        if "object" not in f.kinds:
            return {}
        return {"additionalProperties": self.field(f.rules["valuesrules"], f"{f.path}.*", f.scope)}

    def _rule_allof(self, f: _Field) -> JSONSchema:
        return {"allOf": self._branches(f, "allof")}

    def _rule_anyof(self, f: _Field) -> JSONSchema:
        return {"anyOf": self._branches(f, "anyof")}

    def _rule_oneof(self, f: _Field) -> JSONSchema:
        return {"oneOf": self._branches(f, "oneof")}

    def _rule_noneof(self, f: _Field) -> JSONSchema:
        return {"not": {"anyOf": self._branches(f, "noneof")}}

    def _branches(self, f: _Field, rule: str) -> list[JSONSchema]:
        # cerberus validates each branch with the field's type and allow_unknown added;
        # null never reaches a branch (``nullable`` is decided before them).
        inherited = {k: f.rules[k] for k in ("type", "allow_unknown") if k in f.rules}
        return [
            self.field(
                {**inherited, **branch} if isinstance(branch, Mapping) else branch,
                f"{f.path}.{rule}[{i}]",
                f.scope,
                nulls=False,
            )
            for i, branch in enumerate(f.rules[rule])
        ]


def _expand(rules: Mapping[str, Any]) -> dict[str, Any]:
    """Apply cerberus's own shorthands: ``anyof_type: [a, b]`` and deprecated rule names."""
    out: dict[str, Any] = {}
    for raw_name, value in rules.items():
        name = _RENAMED_RULES.get(raw_name, raw_name)
        operator, _, rule = name.partition("_")
        if operator in _OF_RULES and rule and isinstance(value, list):
            out[operator] = [*out.get(operator, []), *({rule: v} for v in value)]
        elif name in _OF_RULES:
            out[name] = [*out.get(name, []), *value]
        else:
            out[name] = value
    return out


def _is_required(rules: Mapping[str, Any], scope: _Scope) -> bool:
    if rules.get("readonly") or rules.get("excludes"):
        return False
    if "default" in rules or "default_setter" in rules:
        return False
    return bool(rules.get("required", scope.require_all))


def _type_names(value: Any) -> list[str] | None:
    if value is None:
        return None
    return [value] if isinstance(value, str) else list(value)


def _kinds(value: Any) -> frozenset[str]:
    names = _type_names(value)
    if names is None:
        return _ANY_KIND
    return frozenset().union(*(_TYPE_KINDS.get(n, frozenset()) for n in names))


def _type_text(f: _Field) -> str:
    names = _type_names(f.rules.get("type"))
    return "any" if names is None else "/".join(names)


def _union(schemas: list[JSONSchema]) -> JSONSchema:
    if not schemas:
        return {}
    if any(len(s) > 1 for s in schemas):
        return dict(schemas[0]) if len(schemas) == 1 else {"anyOf": schemas}
    names: list[str] = []
    for schema in schemas:
        for name in _type_names(schema["type"]) or []:
            if name not in names:
                names.append(name)
    return {"type": names[0] if len(names) == 1 else names}


def _lengths(kinds: frozenset[str], index: int, value: int) -> JSONSchema:
    return {words[index]: value for kind, words in _LENGTHS.items() if kind in kinds}


def _bound(f: _Field, rule: str, keyword: str) -> JSONSchema:
    value = f.rules[rule]
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return {keyword: value} if numeric and f.kinds & {"integer", "number"} else {}


def _by_kind(
    kinds: frozenset[str], scalar: JSONSchema, array: JSONSchema, obj: JSONSchema
) -> JSONSchema:
    """A rule that means different things for lists, dicts and other values."""
    branches: list[tuple[Any, JSONSchema]] = []
    if "array" in kinds:
        branches.append(("array", array))
    if "object" in kinds:
        branches.append(("object", obj))
    scalars = sorted({_SCALAR_TYPES[k] for k in kinds if k in _SCALAR_TYPES})
    if scalars:
        branches.append((scalars[0] if len(scalars) == 1 else scalars, scalar))
    if len(branches) == 1:
        return branches[0][1]
    if not any(part for _, part in branches):
        return {}
    return {"anyOf": [{"type": kind, **part} for kind, part in branches]}


def _is_fields_mapping(value: Mapping[str, Any], kinds: frozenset[str]) -> bool:
    """Whether a ``schema`` rule describes a dict's fields (else a list's items)."""
    if "object" not in kinds:
        return False
    # cerberus's own heuristic when the type leaves it open (see DefinitionSchema.expand).
    return "array" not in kinds or all(isinstance(v, Mapping) for v in value.values())


def _anchored(pattern: str) -> str:
    flags = _GLOBAL_FLAGS.match(pattern)
    lead = flags.group(0) if flags else ""
    return f"{lead}^(?:{pattern[len(lead) :]})$"


def _with_null(schema: JSONSchema, nullable: bool, *, typed: bool) -> JSONSchema:
    """Let ``null`` through when ``nullable``; cerberus rejects it otherwise, typed or not."""
    if not nullable:
        return schema if typed else _conjoin([schema, {"not": {"type": "null"}}])
    rejecting = schema.keys() & _NULL_REJECTING
    if not rejecting:
        return schema
    if "type" in rejecting and rejecting <= {"type", "enum"}:
        out = dict(schema)
        out["type"] = [*(_type_names(schema["type"]) or []), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    return {"anyOf": [{"type": "null"}, schema]}


def _conjoin(parts: list[JSONSchema]) -> JSONSchema:
    """One schema that all ``parts`` must hold; clashing parts go under ``allOf``."""
    merged: JSONSchema = {}
    claimed: set[str] = set()
    rest: list[JSONSchema] = []
    for part in parts:
        if not part:
            continue
        keys = set(part).union(*(g for g in _KEYWORD_GROUPS if g & part.keys()))
        if keys & claimed:
            rest.append(part)
        else:
            merged.update(part)
            claimed |= keys
    if rest:
        merged["allOf"] = [*merged.get("allOf", []), *rest]
    return merged


def _annotations(rules: Mapping[str, Any]) -> JSONSchema:
    out: JSONSchema = {}
    meta = rules.get("meta")
    if isinstance(meta, str):
        out["description"] = meta
    elif isinstance(meta, Mapping):
        out.update({k: str(meta[k]) for k in ("title", "description") if k in meta})
        if isinstance(meta.get("examples"), list):
            out["examples"] = _jsonable(meta["examples"])
    if "default" in rules:
        out["default"] = _jsonable(rules["default"])
    return out


def _jsonable(value: Any) -> Any:
    """A JSON-ready rendering of a rule value (callables by name, dates as ISO text)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((_jsonable(v) for v in value), key=repr)
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if callable(value):
        return getattr(value, "__qualname__", repr(value))
    return repr(value)


def _join(path: str, name: Any) -> str:
    return f"{path}.{name}" if path else str(name)
