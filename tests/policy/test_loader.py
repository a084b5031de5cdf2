"""load_policy_sources: what it reads, and every fault it refuses, named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.types import DecisionResult
from tests.policy.helpers import WritePolicy

GOOD_REGO = """\
package toolgate

decision := {"result": "allow", "reasons": []}
"""


def load_error(rego_dir: Path, policies_dir: Path) -> str:
    with pytest.raises(ConfigError) as info:
        load_policy_sources(rego_dir, policies_dir)
    return "\n".join(info.value.problems)


def test_shipped_sources(shipped: PolicySources) -> None:
    assert [Path(name).name for name, _ in shipped.modules] == ["toolgate.rego"]
    assert [Path(name).name for name, _ in shipped.test_modules] == ["toolgate_test.rego"]
    assert shipped.data["actors"]["carol"] == {"roles": ["agent", "approver"]}
    assert shipped.data["workspaces"]["demo"]["root"] == "var/workspaces/demo"
    assert shipped.data["approvers"]["allow_self_approval"] is False
    assert set(shipped.data) == {
        "actors",
        "workspaces",
        "protected_paths",
        "risk_rules",
        "tool_overrides",
        "approval_tags",
        "approvers",
        "quotas",
    }


def test_rego_syntax_error_names_the_file(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy(
        {"good.rego": GOOD_REGO, "bad.rego": "package toolgate\n\nbroken := {\n"}
    )
    message = load_error(rego_dir, policies_dir)
    assert f"{rego_dir / 'bad.rego'}: does not parse" in message
    assert "good.rego" not in message


def test_unknown_function_is_caught_at_load(write_policy: WritePolicy) -> None:
    rego = GOOD_REGO + "\nhelper := crypto.rot13(input.x) if input.never\n"
    rego_dir, policies_dir = write_policy({"policy.rego": rego})
    message = load_error(rego_dir, policies_dir)
    assert f"{rego_dir / 'policy.rego'}:5:" in message
    assert "crypto.rot13" in message


def test_unknown_function_in_an_unused_function_is_caught(write_policy: WritePolicy) -> None:
    rego = GOOD_REGO + "\nf(x) := nosuch.thing(x)\n"
    rego_dir, policies_dir = write_policy({"policy.rego": rego})
    assert "nosuch.thing" in load_error(rego_dir, policies_dir)


def test_recursion_names_the_file(write_policy: WritePolicy) -> None:
    rego = GOOD_REGO + "\nloop := data.toolgate if input.x\n"
    rego_dir, policies_dir = write_policy({"policy.rego": rego})
    message = load_error(rego_dir, policies_dir)
    assert str(rego_dir / "policy.rego") in message
    assert "recursion" in message.lower()


def test_test_modules_are_only_parsed(write_policy: WritePolicy) -> None:
    test = "package toolgate_test\n\ntest_x if { data.toolgate.decision with input as {} }\n"
    rego_dir, policies_dir = write_policy({"p.rego": GOOD_REGO, "p_test.rego": test})
    sources = load_policy_sources(rego_dir, policies_dir)
    assert [Path(n).name for n, _ in sources.test_modules] == ["p_test.rego"]
    rego_dir, policies_dir = write_policy({"p_test.rego": "package toolgate_test\ntest_x if {\n"})
    assert "p_test.rego: does not parse" in load_error(rego_dir, policies_dir)


def test_missing_decision_rule(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy({"p.rego": "package toolgate\n\nanswer := 42\n"})
    assert "no module defines data.toolgate.decision" in load_error(rego_dir, policies_dir)


def test_no_policy_modules(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy({})
    assert "no policy modules" in load_error(rego_dir, policies_dir)


def test_missing_directories(tmp_path: Path) -> None:
    message = load_error(tmp_path / "nope-rego", tmp_path / "nope-policies")
    assert "nope-rego: the Rego directory does not exist" in message
    assert "nope-policies: the policy data directory does not exist" in message


def test_data_is_merged_under_toolgate(write_policy: WritePolicy) -> None:
    rego = (
        "package toolgate\n\n"
        'decision := {"result": data.toolgate.a.r, "reasons": [data.toolgate.b]}\n'
    )
    rego_dir, policies_dir = write_policy(
        {"p.rego": rego}, {"one.yaml": "a: {r: allow}\n", "two.yml": "b: why\n"}
    )
    sources = load_policy_sources(rego_dir, policies_dir)
    assert sources.data == {"a": {"r": "allow"}, "b": "why"}
    decision = EmbeddedPolicy(sources).decide_sync({})
    assert (decision.result, decision.reasons) == (DecisionResult.ALLOW, ("why",))


def test_a_json_data_file_is_refused_not_ignored(write_policy: WritePolicy) -> None:
    """OPA reads data.json; the gateway reads YAML only, and says so rather than run a
    policy without the data its author put beside it."""
    rego_dir, policies_dir = write_policy(
        {"p.rego": GOOD_REGO}, {"one.yaml": "a: 1\n", "data.json": '{"b": 2}\n'}
    )
    assert load_error(rego_dir, policies_dir) == (
        f"{policies_dir / 'data.json'}: policy data is read from *.yaml and *.yml only, so this"
        " file would be ignored; rename it to .yaml (JSON indented with spaces is YAML) or"
        " convert it"
    )


def test_duplicate_top_level_key_names_both_files(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy(
        {"p.rego": GOOD_REGO},
        {"a.yaml": "actors: {}\nquotas: {}\n", "b.yaml": "# comment\n\nactors: {}\n"},
    )
    message = load_error(rego_dir, policies_dir)
    assert f"{policies_dir / 'b.yaml'}:3: actors: already defined at " in message
    assert f"{policies_dir / 'a.yaml'}:1" in message


def test_yaml_syntax_error_names_file_and_line(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy(
        {"p.rego": GOOD_REGO}, {"bad.yaml": "actors:\n  alice: {roles: [agent]\n  bob: {}\n"}
    )
    message = load_error(rego_dir, policies_dir)
    assert f"{policies_dir / 'bad.yaml'}:3: YAML error" in message


def test_yaml_duplicate_key_in_one_file(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy(
        {"p.rego": GOOD_REGO}, {"a.yaml": "actors: {}\nactors: {}\n"}
    )
    assert "duplicate key 'actors'" in load_error(rego_dir, policies_dir)


def test_data_that_is_not_a_mapping(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy({"p.rego": GOOD_REGO}, {"a.yaml": "- just\n- a list\n"})
    message = load_error(rego_dir, policies_dir)
    assert f"{policies_dir / 'a.yaml'}:1: policy data must be a mapping" in message


def test_values_json_cannot_carry(write_policy: WritePolicy) -> None:
    data = "quotas:\n  since: 2024-01-01\n  limit: .nan\n  1: one\n"
    rego_dir, policies_dir = write_policy({"p.rego": GOOD_REGO}, {"q.yaml": data})
    message = load_error(rego_dir, policies_dir)
    path = policies_dir / "q.yaml"
    assert f"{path}:2: quotas.since: a date is not JSON" in message
    assert f"{path}:3: quotas.limit: nan is not a JSON number" in message
    assert f"{path}:4: quotas.1: the key must be a string" in message


def test_data_key_colliding_with_a_rule(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy({"p.rego": GOOD_REGO}, {"a.yaml": "decision: allow\n"})
    message = load_error(rego_dir, policies_dir)
    assert f"{policies_dir / 'a.yaml'}:1: decision: the data key collides with the rule" in message


def test_all_faults_reported_at_once(write_policy: WritePolicy) -> None:
    rego_dir, policies_dir = write_policy(
        {"p.rego": GOOD_REGO}, {"a.yaml": "x: [\n", "b.yaml": "- 1\n"}
    )
    with pytest.raises(ConfigError) as info:
        load_policy_sources(rego_dir, policies_dir)
    assert len(info.value.problems) == 2
