"""The compiled fast path of argument validation agrees with cerberus, always.

The reference is ``JsonValidator(schema, purge_readonly=True)``, what the catalogue used
before the fast path. Property tests generate schemas (the modelled rules, and some others)
and documents near the schema (bools for ints, wrong types, None, empty values, unknown and
missing fields, nested dicts and lists); every shipped tool must take the fast path.
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cerberus
import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

from gateway.declarations.catalogue import Catalogue
from gateway.declarations.fastvalid import FastValidator, Unsupported, compile_schema
from gateway.declarations.validator import JsonValidator
from gateway.testing import load_catalogue

REPO = Path(__file__).resolve().parents[2]


# --- comparison ---------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    """Equal with the same types throughout (``1 == 1.0 == True`` does not count), and dict
    keys in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return [(type(k), k) for k in a] == [(type(k), k) for k in b] and all(
            _same(a[k], b[k]) for k in a
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def _flat(errors: Any, path: tuple[Any, ...] = ()) -> set[tuple[Any, ...]]:
    """cerberus's nested errors as a set of (path..., message)."""
    out: set[tuple[Any, ...]] = set()
    for field, problems in errors.items():
        for problem in problems:
            if isinstance(problem, dict):
                out |= _flat(problem, (*path, field))
            else:
                out.add((*path, field, problem))
    return out


def _outcome(validator: Any, doc: Any) -> tuple[Any, ...]:
    before = copy.deepcopy(doc)
    try:
        ok = validator.validate(doc)
    except Exception as exc:  # cerberus raises on some documents: the fast path must too
        return ("raised", type(exc))
    assert _same(doc, before), "the validator changed its input"
    return ("done", ok, validator.errors, validator.document)


def _compare(fast: FastValidator, ref: JsonValidator, doc: Any) -> str:
    """Check one document; return which path decided it."""
    mine = _outcome(fast, copy.deepcopy(doc))
    theirs = _outcome(ref, copy.deepcopy(doc))
    if fast.last_screened:
        # The screen refused at once: cerberus refuses too, with these errors among its own
        # (or fails on the document: a refusal is then the better answer).
        if theirs[0] != "raised":
            assert theirs[:2] == ("done", False), (doc, mine, theirs)
            assert _flat(mine[2]) <= _flat(theirs[2]), (doc, mine[2], theirs[2])
        return "screened"
    if fast.last_fast:
        # The fast path accepted: cerberus accepts, with the very same document.
        assert theirs[:3] == ("done", True, {}), (doc, theirs)
        assert _same(mine[3], theirs[3]), (doc, mine[3], theirs[3])
    assert mine[:3] == theirs[:3], (doc, mine, theirs)
    if mine[0] == "done":
        assert _same(mine[3], theirs[3]), (doc, mine[3], theirs[3])
    if fast.last_fast:
        return "fast"
    return "fallback" if fast.has_fast_path else "cerberus only"


def _explore(
    data: st.DataObject,
    fast: FastValidator,
    ref: JsonValidator,
    schema: dict[str, Any],
    doc: Any,
    paths: Counter[str],
) -> None:
    """Compare ``doc``; while cerberus refuses it, compare it again without the fields
    cerberus refused. From the valid document this usually reaches, compare near misses:
    one field given another value, or left out."""
    for _ in range(3):
        paths[_compare(fast, ref, doc)] += 1
        outcome = _outcome(ref, copy.deepcopy(doc))
        if not isinstance(doc, dict) or outcome[:2] != ("done", False):
            break
        doc = {k: v for k, v in doc.items() if k not in outcome[2]}
    if not (isinstance(doc, dict) and outcome[:2] == ("done", True) and schema):
        return
    for _ in range(data.draw(st.integers(0, 4), label="near misses")):
        name = data.draw(st.sampled_from(sorted(schema)), label="field")
        variant = dict(doc)
        if name in variant and data.draw(st.integers(0, 4)) == 0:
            del variant[name]
        else:
            variant[name] = data.draw(_value(schema[name], 0), label="value")
        paths[_compare(fast, ref, variant)] += 1


def _pair(schema: dict[str, Any]) -> tuple[FastValidator, JsonValidator]:
    """The validator under test and the reference, or ``reject()`` if cerberus refuses the
    schema (after checking that the fast validator refuses it too)."""
    try:
        ref = JsonValidator(copy.deepcopy(schema), purge_readonly=True)
    except (cerberus.SchemaError, TypeError) as exc:
        with pytest.raises(type(exc)):
            FastValidator(copy.deepcopy(schema), purge_readonly=True)
        reject()
    return FastValidator(copy.deepcopy(schema), purge_readonly=True), ref


# --- strategies ---------------------------------------------------------------------------

NAMES = ["a", "b", "c", "d"]
TEXTS = ["", "a", "b", "ab", "ba", "aab", "x.py", "A-1", " "]
PATTERNS = ["a+", "[ab]*", ".+\\.py", "a|ab", "b?", "^a.*$", "(?i)A+"]
TYPES: list[Any] = [
    "string",
    "integer",
    "float",
    "number",
    "boolean",
    "dict",
    "list",
    ["integer", "string"],
    ["boolean", "integer"],
    ["float", "string"],
    ["dict", "list"],
    "container",
    "datetime",
    [],
]
TEXT = st.sampled_from(TEXTS)
SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 5),
    st.floats(-3, 5, allow_nan=False),
    st.sampled_from([0.0, 1.0, -0.0, math.inf]),
    TEXT,
)
ANY = st.one_of(
    SCALAR,
    st.lists(SCALAR, max_size=3),
    st.dictionaries(st.sampled_from([*NAMES, "z"]), SCALAR, max_size=3),
    st.tuples(SCALAR),  # not a JSON type: must go to cerberus
)


def _check_with(field: Any, value: Any, error: Callable[..., Any]) -> None:
    if value == "b":
        error(field, "no b")


# Rules the fast path does not model: a schema with any of them is left to cerberus.
UNMODELLED: list[dict[str, Any]] = [
    {"coerce": str},
    {"contains": "a"},
    {"anyof": [{"type": "string"}, {"type": "integer"}]},
    {"purge_unknown": True},
    {"rename": "z"},
    {"keysrules": {"type": "string"}},
    {"valuesrules": {"type": "integer"}},
    {"items": [{"type": "string"}]},
    {"check_with": _check_with},
    {"allow_unknown": {"type": "string"}},
    {"dependencies": "^a"},
    {"dependencies": "a.b"},
    {"schema": "registered"},
]


@st.composite
def _rules(draw: st.DrawFn, depth: int, item: bool = False) -> dict[str, Any]:
    rules: dict[str, Any] = {}
    maybe = lambda: draw(st.integers(0, 4)) == 0  # noqa: E731
    kind = draw(st.sampled_from([None, *TYPES]))
    if kind is not None:
        rules["type"] = kind
    kinds = {kind} if isinstance(kind, str | None) else set(kind)
    for rule in ("required", "nullable", "empty", "meta") + (() if item else ("readonly",)):
        if maybe():
            rules[rule] = draw(st.booleans())
    if maybe():
        members = TEXT | st.integers(-1, 3)
        if kinds <= {"string"} or kinds <= {"integer"}:
            members = TEXT if kinds <= {"string"} else st.integers(-1, 3)
        rules["allowed"] = draw(st.lists(members, max_size=4))
    if maybe():
        rules["forbidden"] = draw(st.lists(st.one_of(TEXT, st.integers(-1, 3)), max_size=3))
    for rule in ("min", "max"):
        if maybe():
            rules[rule] = draw(st.one_of(st.integers(-2, 4), st.floats(-2, 4), TEXT))
    for rule in ("minlength", "maxlength"):
        if maybe():
            rules[rule] = draw(st.integers(0, 3))
    if maybe():
        rules["regex"] = draw(st.sampled_from(PATTERNS))
    if depth > 0 and kinds & {"dict", "list", "container", None} and draw(st.booleans()):
        # Mostly the kind of schema that fits the type (the other one is a cerberus error).
        fields = "list" not in kinds if draw(st.integers(0, 5)) else draw(st.booleans())
        if fields:
            rules["schema"] = draw(_fields(depth - 1))
            for rule in ("allow_unknown", "require_all"):
                if maybe():
                    rules[rule] = draw(st.booleans())
        else:
            rules["schema"] = draw(_rules(depth - 1, item=True))
    elif maybe():
        rules["allow_unknown"] = draw(st.booleans())
    if maybe():
        value = _value(rules, 0)
        rules["default"] = draw(st.one_of(value, value, value, ANY.filter(_not_tuple)))
    if draw(st.integers(0, 30)) == 0:
        rules.update(draw(st.sampled_from(UNMODELLED)))
    return rules


@st.composite
def _fields(draw: st.DrawFn, depth: int) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    fields = {name: draw(_rules(depth)) for name in names}
    others = st.sampled_from([*NAMES, "z"])
    for name in names:
        pick = draw(st.integers(0, 9))
        if pick == 0:
            fields[name]["dependencies"] = draw(st.lists(others, max_size=2) | others)
        elif pick == 1:
            fields[name]["dependencies"] = draw(
                st.dictionaries(others, st.lists(SCALAR, max_size=2) | SCALAR, max_size=2)
            )
        elif pick == 2:
            fields[name]["excludes"] = draw(st.lists(others, max_size=2) | others)
    return fields


def _value(rules: Any, depth: int) -> st.SearchStrategy[Any]:
    """Values for a field with ``rules``: mostly near-valid, some anything."""
    if not isinstance(rules, dict):
        return ANY
    kind = rules.get("type")
    kinds = [kind] if isinstance(kind, str) else list(kind or ["string", "integer", "list"])
    typed: list[st.SearchStrategy[Any]] = []
    sub = rules.get("schema")
    for name in kinds:
        if name == "string":
            typed.append(TEXT)
            if isinstance(rules.get("regex"), str):
                typed.append(st.from_regex(rules["regex"], fullmatch=True).filter(_short))
        elif name == "integer":
            typed.append(st.integers(-3, 5))
        elif name in ("float", "number"):
            typed.append(st.integers(-3, 5) | st.floats(-3, 5, allow_nan=False))
        elif name == "boolean":
            typed.append(st.booleans())
        elif name in ("dict", "container") and (sub is None or _is_fields(sub)):
            typed.append(_document(sub or {}, depth + 1) if depth < 3 else st.just({}))
        if name in ("list", "container"):
            items = sub if isinstance(sub, dict) and not _is_fields(sub) else None
            typed.append(st.lists(_value(items, depth + 1) if depth < 3 else ANY, max_size=3))
    if rules.get("allowed"):
        typed.append(st.sampled_from(rules["allowed"]))
        typed.append(st.lists(st.sampled_from(rules["allowed"]), max_size=3))
    near = st.one_of(typed) if typed else ANY
    # One value in ten is None or anything (hypothesis favours no branch of this choice).
    return st.integers(0, 19).flatmap(lambda i: st.none() if i == 7 else ANY if i == 11 else near)


def _not_tuple(value: Any) -> bool:
    return type(value) is not tuple


def _short(text: str) -> bool:
    return len(text) <= 12


def _is_fields(sub: Any) -> bool:
    return isinstance(sub, dict) and all(isinstance(r, dict) for r in sub.values())


@st.composite
def _document(draw: st.DrawFn, schema: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for name, rules in schema.items():
        required = isinstance(rules, dict) and rules.get("required")
        if draw(st.integers(0, 9 if required else 3)):  # mostly present
            doc[name] = draw(_value(rules, depth))
    if draw(st.integers(0, 9)) == 0:
        doc[draw(st.sampled_from(["z", "e"]))] = draw(SCALAR)
    if draw(st.integers(0, 4)) == 0 and doc:  # shuffle: key order is part of the result
        keys = draw(st.permutations(list(doc)))
        doc = {k: doc[k] for k in keys}
    return doc


# --- property tests -----------------------------------------------------------------------


def test_generated_schemas_and_documents_agree_with_cerberus() -> None:
    paths: Counter[str] = Counter()

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        schema = data.draw(_fields(2), label="schema")
        fast, ref = _pair(schema)
        # Several documents on one validator: its state must not leak between calls.
        for _ in range(data.draw(st.integers(1, 6))):
            doc = data.draw(st.one_of(*[_document(schema)] * 4, ANY))  # ANY: not always a dict
            _explore(data, fast, ref, schema, doc, paths)

    run()
    total = sum(paths.values())
    # Not vacuous: each path decided a fair share of the documents.
    assert paths["fast"] >= total // 30, paths
    assert paths["fallback"] >= total // 30, paths
    assert paths["cerberus only"] >= 1, paths


def test_documents_for_the_shipped_schemas_agree_with_cerberus() -> None:
    tools = load_catalogue(REPO / "tools.d").all()
    paths: Counter[str] = Counter()

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        tool = data.draw(st.sampled_from(tools), label="tool")
        fast, ref = _pair(tool.input)
        doc = data.draw(_document(tool.input), label="doc")
        _explore(data, fast, ref, tool.input, doc, paths)

    run()
    assert paths["fast"] >= 5 and paths["fallback"] >= 5, paths


# --- shipped tools ------------------------------------------------------------------------

KIB = "x" * 1024
EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "db.mark_shipped": [{"order_id": 1, "carrier": "dhl", "tracking": "JD0001-42"}],
    "db.query_orders": [{"status": "paid", "limit": 10}, {}, {"status": None, "customer": "c"}],
    "fs.append_file": [{"path": "notes/a.txt", "content": KIB}, {"path": "a", "content": ""}],
    "fs.apply_patch": [{"path": "a.txt", "patch": "--- a/a.txt\n+++ b/a.txt\n"}],
    "fs.delete_file": [{"path": "notes/a.txt"}],
    "fs.list_dir": [{"path": "notes", "recursive": True}, {}],
    "fs.read_file": [{"path": "one-kib.txt"}],
    "fs.write_file": [{"path": "notes/a.txt", "content": KIB}, {"path": "b", "content": "c"}],
    "fs.write_files": [
        {"files": [{"path": f"notes/{i}.txt", "content": KIB} for i in range(3)]},
        {"files": [{"content": "", "path": "a"}], "create_dirs": False},
    ],
    "http.get_json": [{"path": "/items/1"}, {"path": "/"}],
    "orders.create": [{"item_id": 1, "quantity": 2, "note": "x"}, {"item_id": 3, "quantity": 100}],
    "orders.get": [{"order_id": "ord_1"}],
    "proc.python": [{"script": "tools/s.py", "args": ["a", "b"], "stdin": ""}, {"script": "s.py"}],
    "proc.run_tests": [{"target": "tests", "keyword": "smoke"}, {}],
    "web.extract_text": [{"url": "https://example.com/", "selector": "h1"}],
    "web.screenshot": [{"url": "https://example.com/"}, {"url": "http://a", "session": "s2"}],
    "web.submit_form": [
        {"url": "https://example.com/form", "name": "Ada", "email": "a@b.c", "plan": "pro"}
    ],
}


def test_every_shipped_tool_takes_the_fast_path() -> None:
    catalogue = load_catalogue(REPO / "tools.d")
    assert set(catalogue.names) <= set(EXAMPLES), "add examples for the new shipped tools"
    for tool in catalogue.all():
        validator = catalogue.validator(tool)
        assert isinstance(validator, FastValidator)
        assert validator is catalogue.validator(tool)  # cached
        assert validator.has_fast_path, (tool.ref, validator.unsupported)
        ref = JsonValidator(copy.deepcopy(tool.input), purge_readonly=True)
        for args in EXAMPLES[tool.name]:
            assert _compare(validator, ref, args) == "fast", (tool.ref, args, ref.errors)


# --- chosen cases -------------------------------------------------------------------------

S = {"type": "string"}
I = {"type": "integer"}  # noqa: E741
CASES: list[tuple[dict[str, Any], dict[str, Any], str]] = [
    # (schema, document, the path that must decide it)
    ({"s": {**S, "nullable": True, "default": None}}, {}, "fast"),
    ({"s": {**S, "nullable": True, "default": "d"}}, {"s": None}, "fast"),
    ({"s": {**S, "default": "d"}}, {"s": None}, "fast"),  # None, not nullable: the default
    ({"s": {**S, "default": None}}, {}, "fallback"),  # a default that does not validate
    ({"s": {**S, "empty": True, "minlength": 2, "regex": "a+"}}, {"s": ""}, "fast"),
    ({"s": {**S, "minlength": 2}}, {"s": ""}, "fallback"),  # no `empty` rule: minlength
    ({"s": {**S, "regex": "a*"}}, {"s": ""}, "fast"),
    ({"s": {**S, "empty": False}}, {"s": ""}, "fallback"),
    ({"l": {"type": "list", "empty": False}}, {"l": []}, "fallback"),
    ({"i": I}, {"i": True}, "fallback"),
    ({"f": {"type": "float"}}, {"f": 1}, "fast"),
    ({"f": {"type": "float"}}, {"f": False}, "fallback"),
    ({"n": {"type": "number", "min": 0, "max": 1}}, {"n": 1.5}, "fallback"),
    ({"n": {"type": "string", "min": 1}}, {"n": "x"}, "fast"),  # not comparable: ignored
    ({"n": {"type": "string", "min": "b"}}, {"n": "a"}, "fallback"),
    ({"l": {"type": "list", "allowed": ["a", "b"]}}, {"l": ["a", "b", "a"]}, "fast"),
    ({"l": {"type": "list", "allowed": ["a", "b"]}}, {"l": ["c"]}, "fallback"),
    ({"b": {"type": ["boolean", "integer"], "allowed": [0]}}, {"b": False}, "fast"),
    ({"s": S}, {"s": "x", "u": 1}, "fallback"),  # unknown field: cerberus names the others
    ({"l": {"type": "list", "maxlength": 1, "schema": I}}, {"l": ["a", "b"]}, "screened"),
    ({"l": {"type": "list", "maxlength": 2, "schema": I}}, {"l": ["a", "b"]}, "fallback"),
    (  # an item over its maxlength: its list's `allowed` is not judged on an emptied item
        {"l": {"type": "list", "allowed": [], "schema": {**S, "maxlength": 0}}},
        {"l": ["a"]},
        "screened",
    ),
    ({"s": {**S, "maxlength": 1}}, {"s": 12}, "fallback"),  # a type error, not a length
    ({"s": {**S, "maxlength": 1, "readonly": True}}, {"s": "ab"}, "fast"),  # purged
    ({"s": {**S, "readonly": True}}, {"s": "x"}, "fast"),  # purged
    ({"s": {**S, "readonly": True, "default": "d"}}, {"s": "x", "t": None}, "fallback"),
    ({"s": {**S, "readonly": True, "default": "d"}, "t": S}, {"s": "x", "t": "y"}, "fast"),
    ({"s": {**S, "readonly": True, "required": True}}, {"s": "x"}, "fallback"),
    ({"s": {**S, "required": True, "default": "d"}}, {}, "fast"),
    ({"x": {}}, {"x": None}, "fallback"),  # nullable is False even without a type
    ({"x": {}}, {"x": (1,)}, "fallback"),  # not a JSON type
    (
        {"d": {"type": "dict", "schema": {"a": {**I, "default": 1}, "b": {**S, "required": True}}}},
        {"d": {"b": "x"}},
        "fast",
    ),
    (
        {"d": {"type": "dict", "schema": {"a": {**I, "default": 1}}}},
        {"d": {"a": 1, "z": 1}},
        "fallback",
    ),
    ({"d": {"type": "dict", "allow_unknown": True, "schema": {}}}, {"d": {"z": [1]}}, "fast"),
    ({"d": {"type": "dict", "require_all": True, "schema": {"a": I}}}, {"d": {}}, "fallback"),
    (
        {"d": {"type": "dict", "empty": False, "schema": {"a": {**I, "default": 1}}}},
        {"d": {}},
        "fast",
    ),
    (
        {"l": {"type": "list", "schema": {"type": "dict", "schema": {"a": {**I, "default": 2}}}}},
        {"l": [{}, {"a": 3}]},
        "fast",
    ),
    ({"l": {"type": "list", "schema": {**I, "default": 7}}}, {"l": [1, None]}, "fast"),
    ({"l": {"type": "list", "schema": {**I, "nullable": True}}}, {"l": [1, None]}, "fast"),
    ({"l": {"type": "list", "schema": I}}, {"l": [1, None]}, "fallback"),
    ({"l": {"type": "list", "default": [], "schema": I}}, {}, "fast"),
    ({"a": {**S, "dependencies": "b"}, "b": S}, {"a": "x"}, "fallback"),
    ({"a": {**S, "dependencies": "b"}, "b": {**S, "default": "y"}}, {"a": "x"}, "fast"),
    ({"a": {**S, "dependencies": {"b": ["y", None]}}, "b": S}, {"a": "x"}, "fast"),
    ({"a": {**S, "dependencies": {"b": "y"}}, "b": S}, {"a": "x", "b": "z"}, "fallback"),
    ({"a": {**S, "excludes": "b"}, "b": S}, {"a": "x", "b": "y"}, "fallback"),
    (
        {"a": {**S, "required": True, "excludes": "b"}, "b": {**S, "required": True}},
        {"b": "y"},
        "fallback",  # `a` is absent: its excludes rule is not evaluated, `a` stays required
    ),
    (
        {"a": {**S, "required": True, "excludes": "b"}, "b": {**S, "excludes": "a"}},
        {"b": "y"},
        "fallback",  # `b` is not required: it does not make `a` optional
    ),
    (
        {
            "a": {**S, "required": True, "excludes": "b"},
            "b": {**S, "required": True, "excludes": "a"},
        },
        {"b": "y"},
        "fast",
    ),
    (
        {"a": {**S, "required": True, "excludes": "b"}, "b": {**S, "required": True}},
        {},
        "fallback",
    ),
    (
        {"a": {**S, "required": True, "excludes": "b", "nullable": True}, "b": S},
        {"a": None},
        "fallback",  # the excluding field is there, but without a value
    ),
    ({"s": {**S, "coerce": str}}, {"s": "x"}, "cerberus only"),
]


@pytest.mark.parametrize(("schema", "doc", "path"), CASES)
def test_chosen_cases(schema: dict[str, Any], doc: dict[str, Any], path: str) -> None:
    fast = FastValidator(copy.deepcopy(schema), purge_readonly=True)
    ref = JsonValidator(copy.deepcopy(schema), purge_readonly=True)
    assert _compare(fast, ref, doc) == path


def test_mutable_defaults_are_not_shared() -> None:
    fast = FastValidator({"l": {"type": "list", "default": []}}, purge_readonly=True)
    assert fast.validate({})
    fast.document["l"].append(1)
    assert fast.validate({}) and fast.document == {"l": []}


def test_fast_and_cerberus_results_alternate_coherently() -> None:
    fast = FastValidator({"n": {"type": "integer", "min": 1}}, purge_readonly=True)
    assert fast.validate({"n": 2}) and fast.last_fast and fast.errors == {}
    assert not fast.validate({"n": 0}) and fast.errors == {"n": ["min value is 1"]}
    assert fast.document == {"n": 0}
    assert fast.validate({"n": 3}) and fast.document == {"n": 3} and fast.errors == {}


def test_the_harness_catches_a_wrong_fast_path() -> None:
    schema = {"n": {"type": "integer", "min": 1, "default": 5}}
    fast, ref = FastValidator(schema), JsonValidator(copy.deepcopy(schema))
    fast._fast = dict  # accepts everything, normalises nothing
    with pytest.raises(AssertionError):
        _compare(fast, ref, {"n": 0})  # cerberus rejects it
    with pytest.raises(AssertionError):
        _compare(fast, ref, {})  # cerberus fills the default


def test_compile_schema_refuses_what_it_does_not_model() -> None:
    compile_schema({"a": {"type": "string", "regex": "a+"}})
    for rules in UNMODELLED:
        with pytest.raises(Unsupported):
            compile_schema({"a": {"type": "string", **rules}})


def test_catalogue_validator_is_a_fast_validator() -> None:
    catalogue = load_catalogue(REPO / "tools.d")
    assert isinstance(catalogue, Catalogue)
    tool = catalogue.resolve("fs.list_dir")
    validator = catalogue.validator(tool)
    assert validator.validate({"path": "a"}) and validator.last_fast
    assert validator.document == {"path": "a", "recursive": False}
    assert not validator.validate({"path": ""})
    assert validator.errors == {"path": ["empty values not allowed"]}


def test_a_document_from_cerberus_does_not_share_the_schemas_default() -> None:
    """cerberus puts a mutable default into its document; the stage after validation rewrites
    values in place, which must not reach the schema (on either path)."""
    schema = {
        "opts": {"type": "dict", "default": {"mode": "a"}},
        "n": {"type": "integer", "coerce": int},  # a rule with no fast path: cerberus decides
    }
    validator = FastValidator(schema, purge_readonly=True)
    assert not validator.has_fast_path
    assert validator.validate({"n": "1"})
    validator.document["opts"]["mode"] = "changed"
    assert validator.validate({"n": "2"})
    assert validator.document == {"n": 2, "opts": {"mode": "a"}}


# --- bounded work (issue 12 §1) -----------------------------------------------------------


def _shipped(name: str) -> FastValidator:
    catalogue = load_catalogue(REPO / "tools.d")
    return catalogue.validator(catalogue.resolve(name, None))


def _count(errors: Any) -> int:
    return len(_flat(errors))


def test_many_unknown_fields_stop_at_the_error_budget() -> None:
    validator = _shipped("fs.write_file")
    doc = {"path": "k.txt", "content": "x", **{f"a{i}": i for i in range(40_000)}}
    assert not validator.validate(doc)
    assert validator.last_screened and validator.errors_truncated
    assert _count(validator.errors) == JsonValidator.max_errors
    assert validator.items_screened <= JsonValidator.max_errors + 3  # not 40,002


def test_an_unknown_field_is_reported_with_every_other_field_at_fault() -> None:
    # the screen found the unknown field and answered with it alone
    validator = _shipped("fs.write_file")
    assert not validator.validate({"path": 5, "content": "x", "bogus": 1})
    assert validator.errors == {"bogus": ["unknown field"], "path": ["must be of string type"]}


def test_a_list_over_its_maxlength_is_reported_by_that_fault_without_walking_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the unknown fields the screen found, and nothing else: cerberus judging the rest
    with the long list emptied named the emptied value in its parent's faults (an
    ``allowed`` of the list said ``''``, not what was sent), which the property test above
    found."""
    made = Counter[str]()
    original = JsonValidator._get_child_validator

    def counting(self: JsonValidator, *args: Any, **kwargs: Any) -> Any:
        made["children"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(JsonValidator, "_get_child_validator", counting)
    validator = _shipped("fs.write_files")
    doc = {"files": [{"x": 1}] * 1500, "create_dirs": "yes", "bogus": 1}
    assert not validator.validate(doc)
    found = (validator.errors, made["children"])
    assert found == ({"files": ["max length is 100"], "bogus": ["unknown field"]}, 0)


@pytest.mark.parametrize(
    ("tool", "doc"),
    [
        ("proc.python", {"script": "a.py", "args": list(range(2500))}),
        ("fs.write_files", {"files": [{"x": 1}] * 1500}),
        ("fs.write_files", {"files": [{"path": "a", "content": "b"}] * 1500}),
    ],
)
def test_a_list_over_its_maxlength_is_refused_without_walking_it(tool: str, doc: Any) -> None:
    validator = _shipped(tool)
    assert not validator.validate(doc)
    field = next(iter(doc.keys() - {"script"}))
    assert validator.errors == {field: [f"max length is {64 if tool == 'proc.python' else 100}"]}
    assert validator.items_screened <= 2


def test_cerberus_stops_after_the_error_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """A schema the fast path does not model (``contains``), a list with no maxlength: cerberus
    decides, and stops after ``max_errors`` errors instead of making (and sorting) 5,000."""
    calls = Counter[str]()
    original = JsonValidator._error

    def counting(self: JsonValidator, *args: Any) -> None:
        calls["errors"] += 1
        original(self, *args)

    monkeypatch.setattr(JsonValidator, "_error", counting)
    schema = {
        "n": {"type": "list", "schema": {"type": "string"}},
        "c": {"type": "list", "contains": "a"},
    }
    validator = FastValidator(schema, purge_readonly=True)
    assert not validator.has_fast_path
    assert not validator.validate({"n": list(range(5000))})
    assert validator.errors_truncated
    assert _count(validator.errors) == JsonValidator.max_errors
    assert calls["errors"] <= 3 * JsonValidator.max_errors  # each error: two calls at most


def test_an_error_in_a_discarded_anyof_branch_does_not_count() -> None:
    rules = {"anyof": [{"type": "integer"}, {"type": "string"}]}
    schema = {"v": {"type": "list", "schema": rules}}
    validator = JsonValidator(schema)
    validator.max_errors = 3
    assert validator.validate({"v": ["a"] * 50})  # 50 failed integer branches: still valid
    assert not validator.validate({"v": [1.5] * 50})
    assert validator.errors_truncated
