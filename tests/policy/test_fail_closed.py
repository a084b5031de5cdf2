"""The embedded backend denies whenever the policy does not give a well-formed decision."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gateway.errors import ConfigError
from gateway.policy import embedded
from gateway.policy.embedded import EmbeddedPolicy, parse_decision
from gateway.policy.loader import (
    EngineError,
    PolicySources,
    engine_call,
    new_engine,
)
from gateway.types import Decision, DecisionResult

Scratch = Callable[[str], PolicySources]


def decide(scratch: Scratch, rego: str, document: dict[str, Any] | None = None) -> Decision:
    return EmbeddedPolicy(scratch("package toolgate\n\n" + rego)).decide_sync(document or {})


def assert_policy_error(decision: Decision, cause: str) -> None:
    assert decision.result is DecisionResult.DENY
    assert len(decision.reasons) == 1
    assert decision.reasons[0].startswith("policy error: ")
    assert cause in decision.reasons[0]


def test_undefined_decision_denies(scratch: Scratch) -> None:
    rego = 'decision := {"result": "allow", "reasons": []} if input.never\n'
    assert_policy_error(decide(scratch, rego), "the decision is undefined")


@pytest.mark.parametrize("value", ['"allow"', '["allow"]', "true", "null"])
def test_decision_that_is_not_an_object_denies(scratch: Scratch, value: str) -> None:
    assert_policy_error(decide(scratch, f"decision := {value}\n"), "not an object")


@pytest.mark.parametrize(
    "body",
    ['"result": "permit", "reasons": []', '"reasons": []', '"result": 1, "reasons": []'],
)
def test_unknown_result_denies(scratch: Scratch, body: str) -> None:
    assert_policy_error(decide(scratch, f"decision := {{{body}}}\n"), "unknown decision result")


@pytest.mark.parametrize("reasons", ["", ', "reasons": "fine"', ', "reasons": ["ok", 3]'])
def test_reasons_not_a_list_of_strings_denies(scratch: Scratch, reasons: str) -> None:
    rego = f'decision := {{"result": "allow"{reasons}}}\n'
    assert_policy_error(decide(scratch, rego), "reasons are not a list of strings")


def test_division_by_zero_denies(scratch: Scratch) -> None:
    rego = 'decision := {"result": "allow", "reasons": [], "n": 1 / input.zero}\n'
    assert_policy_error(decide(scratch, rego, {"zero": 0}), "divide by zero")


def test_builtin_with_a_wrong_type_denies(scratch: Scratch) -> None:
    rego = 'decision := {"result": "allow", "reasons": [], "n": count(input.number)}\n'
    assert_policy_error(decide(scratch, rego, {"number": 5}), "count")


def test_error_in_a_helper_rule_denies(scratch: Scratch) -> None:
    # The interpreter is strict: an error anywhere fails the evaluation, even behind `not`.
    rego = (
        'decision := {"result": "allow", "reasons": []} if not broken\n'
        "broken if to_number(input.text) > 1\n"
    )
    assert_policy_error(decide(scratch, rego, {"text": "many"}), "policy error")


def test_extra_keys_and_set_reasons(scratch: Scratch) -> None:
    rego = 'decision := {"result": "deny", "reasons": {"b", "a"}, "obligations": {"log": true}}\n'
    decision = decide(scratch, rego)
    assert decision == Decision(DecisionResult.DENY, ("a", "b"), {"obligations": {"log": True}})


def test_well_formed_decision_passes_through(scratch: Scratch) -> None:
    rego = 'decision := {"result": "require_approval", "reasons": [input.why]}\n'
    decision = decide(scratch, rego, {"why": "because"})
    assert decision == Decision(DecisionResult.REQUIRE_APPROVAL, ("because",))


def test_parse_decision_of_undefined() -> None:
    assert_policy_error(parse_decision(embedded.UNDEFINED), "undefined")


class FakePanic(BaseException):
    """Stands for pyo3's PanicException, which derives from BaseException."""


class PanickingEngine:
    def set_input_json(self, text: str) -> None:
        pass

    def eval_rule_as_json(self, rule: str) -> str:
        raise FakePanic("thread panicked at 'index out of bounds'")


def test_engine_panic_denies(shipped: PolicySources, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = EmbeddedPolicy(shipped, rule="data.toolgate.decision")
    monkeypatch.setattr(backend, "_engine", PanickingEngine)
    assert_policy_error(backend.decide_sync({}), "index out of bounds")


def test_keyboard_interrupt_is_not_swallowed() -> None:
    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        engine_call(interrupted)


def test_a_real_regorus_panic_becomes_an_engine_error(shipped: PolicySources) -> None:
    engine = new_engine(shipped.modules, shipped.data_json())  # bound to this thread
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(engine_call, engine.eval_rule_as_json, "data.toolgate.decision")
        with pytest.raises(EngineError, match="unsendable"):
            future.result()


def test_sources_regorus_cannot_load_are_a_config_error() -> None:
    broken = PolicySources((("x.rego", "package toolgate\ndecision := {\n"),), (), {})
    with pytest.raises(ConfigError, match=r"x\.rego"):
        EmbeddedPolicy(broken)
