"""cerberus → JSON Schema: golden cases, agreement with cerberus, and the unmapped list."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import cerberus
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from gateway.declarations.jsonschema import (
    UNMAPPED_KEY,
    cerberus_to_json_schema,
    unmapped_rules,
    validate_cerberus_schema,
)
from gateway.declarations.validator import JsonValidator


def _convert(schema: dict[str, Any], **options: Any) -> dict[str, Any]:
    out = cerberus_to_json_schema(schema, **options)
    Draft202012Validator.check_schema(out)
    json.dumps(out)
    return out


def _prop(rules: dict[str, Any]) -> dict[str, Any]:
    return _convert({"f": rules})["properties"]["f"]


def _rules(schema: dict[str, Any]) -> set[tuple[str, str]]:
    return {(e["path"], e["rule"]) for e in unmapped_rules(schema)}


# --- golden cases -------------------------------------------------------------------------

GOLDEN = [
    ({"type": "string"}, {"type": "string"}),
    ({"type": "integer"}, {"type": "integer"}),
    ({"type": "float"}, {"type": "number"}),
    ({"type": "number"}, {"type": "number"}),
    ({"type": "boolean"}, {"type": "boolean"}),
    ({"type": "dict"}, {"type": "object"}),
    ({"type": "list"}, {"type": "array"}),
    ({"type": ["string", "integer"]}, {"type": ["string", "integer"]}),
    ({"type": "string", "nullable": True}, {"type": ["string", "null"]}),
    ({"type": "string", "empty": False}, {"type": "string", "minLength": 1}),
    ({"type": "list", "empty": False}, {"type": "array", "minItems": 1}),
    (
        {"type": "string", "minlength": 2, "maxlength": 5},
        {"type": "string", "minLength": 2, "maxLength": 5},
    ),
    ({"type": "string", "minlength": 3, "empty": False}, {"type": "string", "minLength": 3}),
    (
        {"type": "list", "minlength": 1, "maxlength": 3},
        {"type": "array", "minItems": 1, "maxItems": 3},
    ),
    ({"type": "integer", "min": 0, "max": 9}, {"type": "integer", "minimum": 0, "maximum": 9}),
    ({"type": "float", "min": 0.5}, {"type": "number", "minimum": 0.5}),
    ({"type": "string", "allowed": ["r", "w"]}, {"type": "string", "enum": ["r", "w"]}),
    (
        {"type": "string", "allowed": ["r", "w"], "nullable": True},
        {"type": ["string", "null"], "enum": ["r", "w", None]},
    ),
    ({"type": "list", "allowed": ["a", "b"]}, {"type": "array", "items": {"enum": ["a", "b"]}}),
    ({"type": "string", "regex": "[a-z]+"}, {"type": "string", "pattern": "^(?:[a-z]+)$"}),
    ({"type": "string", "regex": "a|b"}, {"type": "string", "pattern": "^(?:a|b)$"}),
    ({"type": "string", "default": "x"}, {"default": "x", "type": "string"}),
    (
        {"type": "string", "meta": {"title": "T", "description": "D", "examples": ["e"]}},
        {"title": "T", "description": "D", "examples": ["e"], "type": "string"},
    ),
    ({"type": "string", "meta": "just text"}, {"description": "just text", "type": "string"}),
    (
        {"type": "dict", "schema": {"a": {"type": "integer", "required": True}}},
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
            "additionalProperties": False,
        },
    ),
    (
        {"type": "dict", "allow_unknown": True, "schema": {"a": {"type": "integer"}}},
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True},
    ),
    (
        {"type": "list", "schema": {"type": "integer", "min": 1}},
        {"type": "array", "items": {"type": "integer", "minimum": 1}},
    ),
    (
        {"type": "list", "items": [{"type": "string"}, {"type": "integer"}]},
        {
            "type": "array",
            "prefixItems": [{"type": "string"}, {"type": "integer"}],
            "minItems": 2,
            "maxItems": 2,
        },
    ),
    (
        {"type": "dict", "keysrules": {"type": "string", "regex": "[A-Z]+"}},
        {"type": "object", "propertyNames": {"type": "string", "pattern": "^(?:[A-Z]+)$"}},
    ),
    (
        {"type": "dict", "valuesrules": {"type": "integer"}},
        {"type": "object", "additionalProperties": {"type": "integer"}},
    ),
    (
        {"type": "integer", "oneof": [{"min": 0}, {"max": -10}]},
        {
            "type": "integer",
            "oneOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": -10}],
        },
    ),
    (
        {"anyof_type": ["string", "integer"]},
        {"anyOf": [{"type": "string"}, {"type": "integer"}], "not": {"type": "null"}},
    ),
    (
        {"type": "integer", "allof": [{"min": 0}, {"max": 5}]},
        {
            "type": "integer",
            "allOf": [{"type": "integer", "minimum": 0}, {"type": "integer", "maximum": 5}],
        },
    ),
    (
        {"type": "integer", "noneof": [{"allowed": [13]}]},
        {"type": "integer", "not": {"anyOf": [{"type": "integer", "enum": [13]}]}},
    ),
    ({"type": "string", "forbidden": ["root"]}, {"type": "string", "not": {"enum": ["root"]}}),
    (
        {"type": "list", "forbidden": ["root"]},
        {"type": "array", "items": {"not": {"enum": ["root"]}}},
    ),
    ({"type": "list", "contains": "x"}, {"type": "array", "contains": {"const": "x"}}),
    (
        {"type": "list", "contains": ["x", "y"]},
        {"type": "array", "allOf": [{"contains": {"const": "x"}}, {"contains": {"const": "y"}}]},
    ),
    ({"type": "string", "readonly": True}, {"readOnly": True, "not": {}}),
    ({"type": "datetime", "coerce": "to_datetime"}, None),  # see test_datetime_types
    (
        {"type": "string", "empty": True, "minlength": 3},
        {"type": "string", "anyOf": [{"enum": [""]}, {"minLength": 3}]},
    ),
    ({}, {"not": {"type": "null"}}),
    ({"nullable": True}, {}),
]


@pytest.mark.parametrize(("rules", "expected"), [g for g in GOLDEN if g[1] is not None])
def test_golden(rules: dict[str, Any], expected: dict[str, Any]):
    assert _prop(rules) == expected


def test_top_level_shape():
    out = _convert(
        {
            "path": {"type": "string", "required": True, "empty": False},
            "content": {"type": "string", "required": True, "maxlength": 1048576},
            "mode": {"type": "string", "default": "w", "required": True},
        }
    )
    assert out == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "minLength": 1},
            "content": {"type": "string", "maxLength": 1048576},
            "mode": {"default": "w", "type": "string"},
        },
        "required": ["content", "path"],
        "additionalProperties": False,
    }


def test_empty_schema_still_lists_required():
    assert _convert({}) == {
        "type": "object",
        "properties": {},
        "required": [],
        "additionalProperties": False,
    }


def test_allow_unknown_and_require_all_options():
    assert _convert({"a": {"type": "string"}}, allow_unknown=True)["additionalProperties"] is True
    typed = _convert({"a": {"type": "string"}}, allow_unknown={"type": "integer"})
    assert typed["additionalProperties"] == {"type": "integer"}
    assert _convert({"a": {"type": "string"}}, require_all=True)["required"] == ["a"]


def test_nested_dict_inherits_allow_unknown():
    schema = {"d": {"type": "dict", "schema": {"x": {"type": "string"}}}}
    assert _convert(schema, allow_unknown=True)["properties"]["d"]["additionalProperties"] is True
    schema["d"]["allow_unknown"] = False
    assert _convert(schema, allow_unknown=True)["properties"]["d"]["additionalProperties"] is False


def test_nested_require_all():
    prop = _prop({"type": "dict", "require_all": True, "schema": {"x": {}, "y": {"default": 1}}})
    assert prop["required"] == ["x"]


def test_schema_and_valuesrules_both_apply_to_every_value():
    prop = _prop({"type": "dict", "schema": {"a": {"type": "integer"}}, "valuesrules": {"min": 0}})
    assert prop["additionalProperties"] is False
    assert prop["allOf"] == [{"additionalProperties": {"minimum": 0, "not": {"type": "null"}}}]
    validator = Draft202012Validator(prop)
    assert validator.is_valid({"a": 1})
    assert not validator.is_valid({"a": -1})


def test_allowed_and_item_schema_are_both_kept():
    prop = _prop({"type": "list", "schema": {"type": "string"}, "allowed": ["a"]})
    validator = Draft202012Validator(prop)
    assert validator.is_valid(["a"])
    assert not validator.is_valid(["b"])


def test_readonly_is_not_required_and_purge_readonly_lets_it_through():
    schema = {"id": {"type": "string", "readonly": True, "required": True}}
    assert _convert(schema)["required"] == []
    purged = _convert(schema, purge_readonly=True)
    assert purged["properties"]["id"] == {"readOnly": True}
    assert purged[UNMAPPED_KEY][0]["rule"] == "readonly"


def test_datetime_types():
    prop = _prop({"type": "datetime", "coerce": "to_datetime"})
    assert prop["type"] == "string"
    assert prop["format"] == "date-time"
    assert prop["x-cerberus-coerce"] == "to_datetime"
    assert _prop({"type": "date"})["format"] == "date"
    assert ("when", "type") in _rules({"when": {"type": "datetime"}})  # no coerce: unreachable


def test_jsonable_values():
    prop = _prop({"type": "date", "allowed": [dt.date(2024, 1, 2)], "coerce": str})
    assert prop["enum"] == ["2024-01-02"]
    assert prop["x-cerberus-coerce"] == "str"


def test_leading_global_regex_flags_stay_in_front():
    prop = _prop({"type": "string", "regex": "(?i)abc"})
    assert prop["pattern"] == "(?i)^(?:abc)$"
    assert ("f", "regex") in _rules({"f": {"type": "string", "regex": "(?i)abc"}})


# --- unmapped rules -----------------------------------------------------------------------


def _check(field: str, value: Any) -> bool:
    return True


UNMAPPABLE: dict[str, Any] = {
    "coerce": int,
    "rename": "other_name",
    "rename_handler": str,
    "check_with": _check,
    "dependencies": ["other"],
    "excludes": "other",
    "default_setter": lambda doc: 1,
    "purge_unknown": True,
}


@pytest.mark.parametrize("rule", sorted(UNMAPPABLE))
def test_unmappable_rule_is_listed_and_marked(rule: str):
    out = _convert({"f": {"type": "integer", rule: UNMAPPABLE[rule]}})
    entries = [e for e in out[UNMAPPED_KEY] if e["rule"] == rule]
    assert entries
    assert entries[0]["path"] == "f"
    assert entries[0]["note"]
    assert f"x-cerberus-{rule}" in out["properties"]["f"]
    assert out["properties"]["f"]["type"] == "integer"


def test_coerced_field_shows_post_coercion_type_and_is_listed():
    out = _convert({"n": {"type": "integer", "coerce": int, "required": True}})
    assert out["properties"]["n"] == {"type": "integer", "x-cerberus-coerce": "int"}
    assert out["required"] == ["n"]
    assert out[UNMAPPED_KEY] == [
        {"path": "n", "rule": "coerce", "value": "int", "note": out[UNMAPPED_KEY][0]["note"]}
    ]


def test_defaulted_and_excluded_fields_are_not_required():
    out = _convert(
        {
            "a": {"required": True, "excludes": "b"},
            "b": {"required": True, "excludes": "a"},
            "c": {"required": True, "default_setter": lambda d: 1},
        }
    )
    assert out["required"] == []


@pytest.mark.parametrize(
    ("rules", "rule"),
    [
        ({"type": "integer", "regex": "[0-9]+"}, "regex"),
        ({"type": "integer", "minlength": 1}, "minlength"),
        ({"type": "integer", "empty": False}, "empty"),
        ({"type": "string", "min": "a"}, "min"),
        ({"type": "date", "max": dt.date(2030, 1, 1), "coerce": str}, "max"),
        ({"type": "integer", "schema": {"type": "integer"}}, "schema"),
        ({"type": "string", "contains": "x"}, "contains"),
        ({"type": "binary"}, "type"),
        ({"type": "string", "regex": "(?P<name>x)"}, "regex"),
    ],
)
def test_rules_without_effect_or_equivalent_are_listed(rules: dict[str, Any], rule: str):
    assert ("f", rule) in _rules({"f": rules})


def test_nested_paths_in_unmapped():
    schema = {
        "d": {"type": "dict", "schema": {"x": {"type": "integer", "coerce": int}}},
        "l": {"type": "list", "schema": {"type": "integer", "coerce": int}},
        "t": {"type": "list", "items": [{"type": "integer", "coerce": int}]},
        "m": {"type": "dict", "valuesrules": {"type": "integer", "coerce": int}},
        "o": {"type": "integer", "anyof": [{"coerce": int}]},
    }
    assert _rules(schema) == {
        ("d.x", "coerce"),
        ("l[]", "coerce"),
        ("t[0]", "coerce"),
        ("m.*", "coerce"),
        ("o.anyof[0]", "coerce"),
    }


def test_purge_unknown_option_is_listed():
    out = _convert({"a": {"type": "string"}}, purge_unknown=True)
    assert out["additionalProperties"] is False
    assert out[UNMAPPED_KEY][0]["rule"] == "purge_unknown"


def test_fully_mapped_schema_has_no_unmapped_key():
    assert UNMAPPED_KEY not in _convert({"a": {"type": "string", "regex": "x+"}})


# --- validate_cerberus_schema -------------------------------------------------------------


def test_valid_schema_has_no_problems():
    schema = {"a": {"type": "string", "required": True}, "b": {"type": "integer", "coerce": int}}
    assert validate_cerberus_schema(schema, "tools.d/x.yaml: input") == []


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"a": {"type": "strin"}}, "w: a.type: unknown type 'strin' (did you mean 'string'?)"),
        ({"a": {"foo": 1}}, "w: a.foo: unknown rule 'foo' (known: allof, allow_unknown, "),
        ({"a": {"minlength": "x"}}, "w: a.minlength: must be of integer type"),
        ({"a": None}, "w: a: rules must be a mapping, not NoneType"),
        (["a"], "w: must be a mapping of field names to rules, not list"),
        ({"a": {"type": "string", "regex": "("}}, "w: a: regex '(' does not compile"),
        ({"a": {"type": "dict", "keyschema": {}}}, "renamed to 'keysrules'"),
        ({"a": {"coerce": "int"}}, "w: a.coerce: none or more than one rule validate ("),
        (
            {"a": {"type": "dict", "schema": {"b": {"type": "bogus"}}}},
            "w: a.schema: no definitions validate (",
        ),
    ],
)
def test_invalid_schema_problems(schema: Any, expected: str):
    problems = validate_cerberus_schema(schema, "w")
    assert any(expected in p for p in problems), problems


def test_named_coercer_accepted_with_a_validator_that_has_it():
    class WithCoercers(JsonValidator):
        def _normalize_coerce_int(self, value: Any) -> int:
            return int(value)

    schema = {"a": {"type": "integer", "coerce": "int"}}
    assert validate_cerberus_schema(schema, "w", validator_cls=WithCoercers) == []


# --- cerberus findings this module relies on ----------------------------------------------


def test_plain_cerberus_takes_booleans_as_integers_json_validator_does_not():
    schema = {"n": {"type": "integer"}, "f": {"type": "float"}}
    assert cerberus.Validator(schema).validate({"n": True, "f": False})
    assert not JsonValidator(schema).validate({"n": True})
    assert not JsonValidator(schema).validate({"f": False})
    assert JsonValidator(schema).validate({"n": 3, "f": 3})
    assert not Draft202012Validator(_convert(schema)).is_valid({"n": True})


def test_integral_float_is_an_integer_only_for_json_schema():
    """The one known disagreement: JSON Schema counts 1.0 as an integer, cerberus does not."""
    schema = {"n": {"type": "integer"}}
    assert not JsonValidator(schema).validate({"n": 1.0})
    assert Draft202012Validator(_convert(schema)).is_valid({"n": 1.0})


def test_plain_cerberus_anchors_only_the_last_alternative_json_validator_the_whole():
    schema = {"s": {"type": "string", "regex": "read|write"}}
    assert cerberus.Validator(schema).validate({"s": "read; rm -rf /"})
    assert not JsonValidator(schema).validate({"s": "read; rm -rf /"})
    assert not Draft202012Validator(_convert(schema)).is_valid({"s": "read; rm -rf /"})
    assert JsonValidator(schema).validate({"s": "write"})


# --- agreement with cerberus (property) ---------------------------------------------------

TEXT = st.text(alphabet="ab", max_size=4)
NUMBER = st.integers(-6, 6) | st.floats(-6, 6, allow_nan=False)
MEMBER = TEXT | st.integers(-3, 3)  # list members: no bools, see _values


@st.composite
def _field_rules(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["string", "integer", "number", "boolean", "list"]))
    rules: dict[str, Any] = {"type": kind}
    for rule, values in (
        ("required", st.booleans()),
        ("nullable", st.booleans()),
        ("empty", st.booleans()),
    ):
        if draw(st.booleans()):
            rules[rule] = draw(values)
    if kind in ("string", "list"):
        _maybe(draw, rules, "minlength", st.integers(0, 3))
        _maybe(draw, rules, "maxlength", st.integers(0, 4))
        members = TEXT if kind == "string" else MEMBER
        _maybe(draw, rules, "allowed", st.lists(members, min_size=1, max_size=3, unique=True))
    if kind in ("integer", "number"):
        bound = st.integers(-5, 5) if kind == "integer" else NUMBER
        _maybe(draw, rules, "min", bound)
        _maybe(draw, rules, "max", bound)
        _maybe(draw, rules, "allowed", st.lists(bound, min_size=1, max_size=3, unique=True))
    if kind == "boolean":
        _maybe(draw, rules, "allowed", st.lists(st.booleans(), min_size=1, max_size=2))
    if kind == "list":
        _maybe(draw, rules, "schema", st.sampled_from([{"type": "string"}, {"type": "integer"}]))
    return rules


def _maybe(draw: st.DrawFn, rules: dict[str, Any], rule: str, values: Any) -> None:
    if draw(st.booleans()):
        rules[rule] = draw(values)


SCHEMAS = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _field_rules(), max_size=4)


def _values(rules: dict[str, Any]) -> st.SearchStrategy[Any]:
    # JSON Schema takes 1.0 as an integer and cerberus does not (see the test above), so
    # integer fields get no integral floats. Untyped list members compare with Python
    # equality in cerberus (True == 1), so members are never booleans.
    floats = st.floats(-6, 6, allow_nan=False)
    if rules["type"] == "integer":
        floats = floats.filter(lambda x: not x.is_integer())
    anything = st.none() | st.booleans() | st.integers(-6, 6) | floats | TEXT
    anything |= st.lists(MEMBER, max_size=4)
    typed = TYPED[rules["type"]]
    if rules.get("allowed"):
        allowed = st.sampled_from(rules["allowed"])
        typed = st.lists(allowed, max_size=3) if rules["type"] == "list" else allowed
    # Mostly well-typed values, so that both answers occur often.
    return st.integers(0, 3).flatmap(lambda i: anything if i == 0 else typed)


TYPED = {
    "string": TEXT,
    "integer": st.integers(-6, 6),
    "number": NUMBER,
    "boolean": st.booleans(),
    "list": st.lists(MEMBER, max_size=4),
}


@st.composite
def _case(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    schema = draw(SCHEMAS)
    present = [name for name in schema if draw(st.integers(0, 4))]  # mostly present
    doc = {name: draw(_values(schema[name])) for name in present}
    if draw(st.integers(0, 5)) == 0:
        doc["unknown"] = draw(TEXT)
    return schema, doc


@settings(max_examples=400, deadline=None)
@given(case=_case())
def test_cerberus_and_json_schema_agree(case: tuple[dict[str, Any], dict[str, Any]]):
    schema, doc = case
    converted = _convert(schema)
    validator = JsonValidator(schema)
    expected = validator.validate(doc)
    assert Draft202012Validator(converted).is_valid(doc) == expected, (validator.errors, converted)


@settings(deadline=None)
@given(
    schema=SCHEMAS,
    extra=st.dictionaries(
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(sorted(set(UNMAPPABLE) - {"purge_unknown"})),
        max_size=4,
    ),
)
def test_unmapped_rules_are_listed(schema: dict[str, Any], extra: dict[str, str]):
    plain = _convert(schema)["properties"]
    added = {(name, rule) for name, rule in extra.items() if name in schema}
    for name, rule in added:
        schema[name][rule] = UNMAPPABLE[rule]
    assert validate_cerberus_schema(schema, "t") == []
    out = _convert(schema)
    assert added <= {(e["path"], e["rule"]) for e in out.get(UNMAPPED_KEY, [])}
    for name, rule in added:
        prop = out["properties"][name]
        assert f"x-cerberus-{rule}" in prop
        # What the rule does not change is still described as before (coerce: the type after).
        assert {k: v for k, v in prop.items() if not k.startswith("x-")} == plain[name]
