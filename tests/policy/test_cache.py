"""The decision cache: keyed by what the policy can read of the input, when that is known."""

from __future__ import annotations

import asyncio
import copy
import enum
import functools
import itertools
import json
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import regorus

from gateway.policy import embedded
from gateway.policy.cache import DecisionCache
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources, syntax_tree
from gateway.policy.reads import InputReads, input_reads
from gateway.types import Decision, DecisionResult
from tests.policy.helpers import BASE_INPUT, make_input

Scratch = Callable[[str], PolicySources]


def backend(sources: PolicySources, **kwargs: Any) -> Iterator[EmbeddedPolicy]:
    policy = EmbeddedPolicy(sources, **kwargs)
    yield policy
    asyncio.run(policy.aclose())


@pytest.fixture
def uncached(shipped: PolicySources) -> Iterator[EmbeddedPolicy]:
    """The shipped sources without cache or projection: every decision on the whole document."""
    yield from backend(shipped, cache_size=0)


def cache_len(policy: EmbeddedPolicy) -> int:
    assert policy._cache is not None, policy.cache_refusal
    return len(policy._cache)


def scratch_policy(scratch: Scratch, rego: str) -> EmbeddedPolicy:
    return EmbeddedPolicy(scratch("package toolgate\n\n" + rego))


# --- the shipped policy ---------------------------------------------------------------------------


def test_the_shipped_policy_is_cached_by_the_fields_it_reads(policy: EmbeddedPolicy) -> None:
    assert policy.cache_refusal is None
    assert policy._tree == {
        "actor": {"credential": {"roles": None}, "user_id": None},
        "approval": {"approved_by": None, "present": None},
        "paths": None,
        "tool": {"name": None, "reversible": None, "risk": None, "side_effect": None, "tags": None},
        "workspace": {"id": None},
    }


def test_fields_the_policy_does_not_read_share_one_entry(policy: EmbeddedPolicy) -> None:
    first = policy.decide_sync(make_input())
    second = policy.decide_sync(
        make_input(
            request={"call_id": "c2", "deadline_ms_left": 5, "time_ms": 1764615600000},
            arguments={"path": "notes/a.txt", "content": "other"},
            arguments_sha256="ffff",
            actor={"agent_id": "someone-else", "roles": ["admin"]},
        )
    )
    assert first == second
    assert first.result is DecisionResult.ALLOW
    assert cache_len(policy) == 1


@pytest.mark.parametrize(
    ("sections", "want"),
    [
        ({"actor": {"user_id": "bob"}}, DecisionResult.DENY),
        ({"workspace": {"id": "ops"}}, DecisionResult.DENY),
        ({"tool": {"name": "fs.delete_file"}}, DecisionResult.REQUIRE_APPROVAL),
        ({"tool": {"risk": "high"}}, DecisionResult.REQUIRE_APPROVAL),
        ({"tool": {"risk": "critical", "reversible": True}}, DecisionResult.DENY),
        ({"tool": {"side_effect": "read"}, "paths": [{"relative": ".git/x"}]}, DecisionResult.DENY),
        (
            {"paths": [{"argument": "path", "relative": ".git/x", "inside_workspace": True}]},
            DecisionResult.DENY,
        ),
        (
            {"paths": [{"argument": "path", "relative": "a", "inside_workspace": False}]},
            DecisionResult.DENY,
        ),
    ],
)
def test_a_field_the_policy_reads_is_part_of_the_key(
    policy: EmbeddedPolicy, sections: dict[str, Any], want: DecisionResult
) -> None:
    assert policy.decide_sync(make_input()).result is DecisionResult.ALLOW
    assert policy.decide_sync(make_input(**sections)).result is want
    assert cache_len(policy) == 2


def test_approval_fields_are_part_of_the_key(policy: EmbeddedPolicy) -> None:
    delete = {"name": "fs.delete_file"}
    asked = policy.decide_sync(make_input(tool=delete))
    approved = policy.decide_sync(
        make_input(tool=delete, approval={"present": True, "approved_by": "bob"})
    )
    self_approved = policy.decide_sync(
        make_input(tool=delete, approval={"present": True, "approved_by": "alice"})
    )
    assert asked.result is DecisionResult.REQUIRE_APPROVAL
    assert approved.result is DecisionResult.ALLOW
    assert self_approved.result is DecisionResult.DENY


def _variants() -> Iterator[dict[str, Any]]:
    """Inputs that differ in every field the shipped policy reads, missing and mistyped too."""
    axes: dict[tuple[str, ...], list[Any]] = {
        ("actor", "user_id"): ["alice", "bob", "carol", "mallory", None, 5, ...],
        ("workspace", "id"): ["demo", "ops", "elsewhere", ...],
        ("tool", "name"): ["fs.write_file", "fs.delete_file", ...],
        ("tool", "risk"): ["low", "medium", "high", "critical", "spicy", ...],
        ("tool", "side_effect"): ["write", "read", "external", ...],
        ("tool", "reversible"): [True, False, "yes", ...],
        ("approval",): [
            {"present": False, "approved_by": None},
            {"present": True, "approved_by": "bob"},
            {"present": True, "approved_by": "carol"},
            {"present": True},
            "yes",
            ...,
        ],
        ("paths",): [
            [{"argument": "path", "relative": ".git/config", "inside_workspace": True}],
            [{"argument": "path", "relative": "my.git/x", "inside_workspace": True}],
            [{"argument": "path", "relative": "../x", "inside_workspace": False}],
            [{"argument": "path", "inside_workspace": True}],
            [],
            {"path": {"relative": ".git/x"}},
            ...,
        ],
    }
    yield {}
    for key, values in axes.items():
        for value in values:
            doc = copy.deepcopy(BASE_INPUT)
            parent = doc
            for part in key[:-1]:
                parent = parent[part]
            if value is ...:
                del parent[key[-1]]
            else:
                parent[key[-1]] = copy.deepcopy(value)
            yield doc
    for a, b in itertools.combinations(["tool", "actor", "workspace", "approval", "paths"], 2):
        yield {k: v for k, v in BASE_INPUT.items() if k not in (a, b)}
        yield {**BASE_INPUT, a: "not an object", b: 7}


def test_cached_decisions_equal_decisions_on_the_whole_document(
    policy: EmbeddedPolicy, uncached: EmbeddedPolicy
) -> None:
    variants = list(_variants())
    for doc in variants * 2:  # the second pass answers from the cache
        assert policy.decide_sync(doc) == uncached.decide_sync(doc), doc
    assert uncached._cache is None
    assert {d.result for d in map(uncached.decide_sync, variants)} == set(DecisionResult)


def test_a_cached_decision_is_a_copy(policy: EmbeddedPolicy) -> None:
    doc = make_input(tool={"name": "fs.delete_file"})
    for _ in range(2):  # the first from the engine, the second from the cache
        decision = policy.decide_sync(doc)
        assert decision.extra == {"approver_roles": ["approver"]}
        decision.extra["approver_roles"].append("mallory")  # type: ignore[index, union-attr]
    assert policy.decide_sync(doc).extra == {"approver_roles": ["approver"]}


def test_the_cache_is_bounded_least_recently_used_first(shipped: PolicySources) -> None:
    for policy in backend(shipped, cache_size=2):
        docs = [make_input(actor={"user_id": who}) for who in ("alice", "bob", "carol")]
        for doc in (docs[0], docs[1], docs[0], docs[2]):  # bob is the least recently used
            policy.decide_sync(doc)
        assert policy._cache is not None
        keys = list(policy._cache._items)
        assert len(keys) == 2
        assert all('"bob"' not in key for key in keys)


def test_a_document_that_is_not_json_is_denied_even_if_cached(policy: EmbeddedPolicy) -> None:
    assert policy.decide_sync(make_input()).result is DecisionResult.ALLOW
    decision = policy.decide_sync(make_input(arguments={"blob": b"\x00"}))
    assert decision.result is DecisionResult.DENY
    assert decision.reasons[0].startswith("policy error: the input document is not JSON")


def test_cache_size_zero_evaluates_the_whole_document(uncached: EmbeddedPolicy) -> None:
    assert uncached.cache_refusal == "the cache is disabled (cache_size=0)"
    assert uncached._tree is None
    assert uncached.decide_sync(make_input()).result is DecisionResult.ALLOW


# --- scratch policies -----------------------------------------------------------------------------


def test_a_policy_that_reads_the_clock_is_not_cached(scratch: Scratch) -> None:
    policy = scratch_policy(
        scratch,
        'decision := {"result": "allow", "reasons": [sprintf("%v", [time.now_ns()])]}\n',
    )
    assert policy.cache_refusal is not None
    assert "time.now_ns" in policy.cache_refusal
    first, second = policy.decide_sync({}), policy.decide_sync({})
    assert first.result is DecisionResult.ALLOW
    assert first.reasons != second.reasons  # evaluated twice, not answered from a cache


def scan(rego: str) -> InputReads:
    """What the scan finds in one module (parsed only: the loader would refuse some of these)."""
    engine = regorus.Engine()
    engine.add_policy("policy.rego", "package toolgate\n\n" + rego)
    return input_reads(syntax_tree(engine))


@pytest.mark.parametrize(
    ("rego", "cause"),
    [
        ("x := input\n", "as a whole"),
        ("x := input[input.key]\n", "as a whole or by a computed key"),
        ("x := object.get(input, input.key, 1)\n", "as a whole or by a computed key"),
        ("x := object.get(input, [], 1)\n", "as a whole"),
        ("x := json.marshal(input)\n", "as a whole"),
        ("x := object.keys(input)\n", "as a whole"),
        ("x := walk(input)\n", "as a whole"),
        ("x := count({k | some k, _ in input})\n", "as a whole"),
        ("f(doc) := doc.tool\nx := f(input)\n", "as a whole"),
        ("import input\nx := input.a\n", "as a whole"),
        ("x := y if {\n  y := data.toolgate.z with input as {}\n}\nz := 1\n", "`with`"),
        ("x := y if {\n  y := data.toolgate.z with input.a as {}\n}\nz := input.b\n", "`with`"),
        ("x := y if {\n  y := count([]) with count as sum\n}\n", "`with`"),
        ('x := rand.intn("k", 10)\n', "rand.intn"),
        ('x := uuid.rfc4122("k")\n', "uuid.rfc4122"),
        ("x := opa.runtime()\n", "opa.runtime"),
        ("x := time.now_ns() + 1\n", "time.now_ns"),
        ('x := print("hello")\n', "print"),
        ('x := http.send({"method": "get", "url": input.url})\n', "http.send"),
        ("import data.lib\nx := lib.f(input.a)\n", "lib.f"),
        ('import data.lib.object\nx := object.get(input, "a", 1)\n', "as a whole"),
        ('# é ü\nimport data.lib.o as object\nx := object.get(input, "a", 1)\n', "as a whole"),
        ('object.get(a, b, c) := a\nx := object.get(input, "a", 1)\n', "as a whole"),
    ],
)
def test_reads_that_cannot_be_bounded_turn_the_cache_off(rego: str, cause: str) -> None:
    reads = scan(rego)
    assert reads.refusal is not None
    assert cause in reads.refusal
    assert reads.refusal.startswith("policy.rego:")


def test_import_of_input_reads_the_imported_path(scratch: Scratch) -> None:
    policy = scratch_policy(
        scratch,
        'import input.tool as t\ndecision := {"result": "allow", "reasons": [t.name]}\n',
    )
    assert policy.cache_refusal is None
    assert policy._tree == {"tool": None}
    a = policy.decide_sync({"tool": {"name": "a", "x": 1}, "other": 1})
    b = policy.decide_sync({"tool": {"name": "b", "x": 1}, "other": 2})
    assert (a.reasons, b.reasons) == (("a",), ("b",))


def test_a_policy_the_scan_refuses_is_evaluated_on_the_whole_document(scratch: Scratch) -> None:
    policy = scratch_policy(
        scratch, 'decision := {"result": "allow", "reasons": [json.marshal(input)]}\n'
    )
    assert policy.cache_refusal is not None and "as a whole" in policy.cache_refusal
    assert policy._cache is None and policy._tree is None
    assert policy.decide_sync({"a": 1}).reasons == ('{"a":1}',)
    assert policy.decide_sync({"a": 2}).reasons == ('{"a":2}',)


@pytest.mark.parametrize(
    ("rego", "tree"),
    [
        ("x := input.a.b\n", {"a": {"b": None}}),
        ('x := input["a"]["b"]\n', {"a": {"b": None}}),
        ("x contains v if {\n  v := input.a[_].b\n}\n", {"a": None}),
        ("x := input.a[0]\n", {"a": None}),
        ("x := input.a.b\ny := input.a\n", {"a": None}),
        ('x := object.get(input, ["a", "b"], 0)\n', {"a": {"b": None}}),
        ('x := object.get(input, "a", 0)\n', {"a": None}),
        ('x := object.get(input, ["a", 0, "c"], 0)\n', {"a": None}),
        ('x := data.toolgate.t[input.k]\nt := {"v": 1}\n', {"k": None}),
        ("x := f(input.a)\nf(v) := v\n", {"a": None}),
        ("x := 1\n", {}),
    ],
)
def test_paths_read(scratch: Scratch, rego: str, tree: dict[str, Any]) -> None:
    decision = 'decision := {"result": "allow", "reasons": []}\n'
    policy = scratch_policy(scratch, decision + rego)
    assert policy.cache_refusal is None
    assert policy._tree == tree


def test_a_value_that_is_not_an_object_on_a_path_is_kept_whole(scratch: Scratch) -> None:
    # input.a.b on a string: the policy sees the string, so the projection keeps it.
    policy = scratch_policy(
        scratch,
        'decision := {"result": "allow", "reasons": [r]} if {\n'
        "  r := input.a.b\n"
        '} else := {"result": "deny", "reasons": [sprintf("%v", [input.c])]}\n',
    )
    assert policy._tree == {"a": {"b": None}, "c": None}
    assert policy.decide_sync({"a": {"b": "x", "z": 1}}).reasons == ("x",)
    assert policy.decide_sync({"a": "text", "c": 2}).reasons == ("2",)
    assert policy.decide_sync({"a": {"z": 1}, "c": 3}).reasons == ("3",)
    assert policy.decide_sync({"c": 4}).reasons == ("4",)


def test_engine_errors_are_not_cached(scratch: Scratch) -> None:
    policy = scratch_policy(
        scratch, 'decision := {"result": "allow", "reasons": [], "n": 1 / input.zero}\n'
    )
    assert policy.decide_sync({"zero": 0}).reasons[0].startswith("policy error:")
    assert cache_len(policy) == 0
    assert policy.decide_sync({"zero": 1}).result is DecisionResult.ALLOW
    assert cache_len(policy) == 1


def test_a_scan_that_fails_turns_the_cache_off(
    shipped: PolicySources, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(modules: object) -> InputReads:
        raise KeyError("Spec")

    monkeypatch.setattr(embedded, "input_reads", broken)
    policy = EmbeddedPolicy(shipped)
    assert policy.cache_refusal == "cannot scan the modules: KeyError: 'Spec'"
    assert policy._cache is None and policy._tree is None
    assert policy.decide_sync(make_input()).result is DecisionResult.ALLOW


def test_a_document_too_deep_to_encode_is_denied(policy: EmbeddedPolicy) -> None:
    deep: dict[str, Any] = {}
    for _ in range(100_000):
        deep = {"a": deep}
    decision = policy.decide_sync(make_input(arguments=deep))
    assert decision.result is DecisionResult.DENY
    assert decision.reasons[0].startswith("policy error: the input document is not JSON")


def _circular() -> list[Any]:
    loop: list[Any] = [1]
    loop.append({"again": loop})
    return loop


_SHARED = {"x": [1, 2]}


@pytest.mark.parametrize(
    "value",
    [
        {"a": [1, "b", None, True, 2.5, {"c": ()}]},
        {"shared": _SHARED, "twice": [_SHARED, _SHARED]},
        {3: "int key", 2.5: "float key", True: "bool key", None: "null key"},
        {"level": DecisionResult.ALLOW, "n": enum.IntEnum("N", "ONE").ONE},
        {"a": [b"\x00"]},
        {"a": {1, 2}},
        {"a": float("nan")},
        [float("-inf")],
        {float("inf"): 1},
        {(1, 2): 1},
        {"a": object()},
        types.MappingProxyType({"a": 1}),
        _circular(),
        # past the quick check's depth: the exact check decides
        functools.reduce(lambda inner, _: {"a": [inner]}, range(40), {"b": 1.5}),
        functools.reduce(lambda inner, _: {"a": [inner]}, range(40), {"b": float("nan")}),
        {"a": [{"b": [1, (2, 3)]}]},
        {"a": [{"b": [1, {4: "x"}]}]},
        {"a": {"b": 2**80, "c": -0.0, "d": [True, None, ""]}},
    ],
)
def test_json_problem_agrees_with_json_dumps(value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        assert embedded.json_problem(value) == str(exc)
    else:
        assert embedded.json_problem(value) is None


def test_a_decision_without_extra_is_shared_and_cannot_be_changed(policy: EmbeddedPolicy) -> None:
    doc = make_input()
    for _ in range(2):  # the first from the engine, the second from the cache
        decision = policy.decide_sync(doc)
        assert decision.result is DecisionResult.ALLOW
        assert decision.extra == {}
        with pytest.raises(TypeError):
            decision.extra["approver_roles"] = ["mallory"]  # type: ignore[index]
        with pytest.raises(AttributeError):
            decision.reasons = ("forged",)  # type: ignore[misc]
    assert policy.decide_sync(doc) == decision


def test_the_decision_cache_keeps_the_most_recent_and_honours_a_ttl() -> None:
    decision = Decision(DecisionResult.ALLOW)
    kept = DecisionCache(2)
    kept.put("a", decision)
    kept.put("b", decision)
    assert kept.get("a") is decision  # "a" is now the most recent
    kept.put("c", decision)
    assert [kept.get(k) is not None for k in "abc"] == [True, False, True]
    expired = DecisionCache(2, ttl=-1.0)  # every entry is past its time once put
    expired.put("a", decision)
    assert expired.get("a") is None and len(expired) == 0
