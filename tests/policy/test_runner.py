"""The Rego test runner: the shipped tests pass, and failures are reported with their cause."""

from __future__ import annotations

import multiprocessing

import pytest

from gateway.errors import ConfigError
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.policy.testing import PolicyTestResult, format_report, run_tests
from tests.policy.helpers import WritePolicy

POLICY = """\
package toolgate

decision := {"result": "allow", "reasons": []} if input.ok
"""

TESTS = """\
package toolgate.test

test_allows if {
    data.toolgate.decision.result == "allow" with input as {"ok": true}
}

test_wrongly_expects_deny if {
    d := data.toolgate.decision with input as {"ok": true}
    print("decided", d.result)
    d.result == "deny"
}

test_not_true := 42

test_error if {
    1 / input.zero == 1 with input as {"zero": 0}
}

test_unknown_function if {
    nosuch.builtin(1)
}

test_helper(x) := x

not_a_test if true
"""


def scratch_results(
    write_policy: WritePolicy, name_filter: str | None = None
) -> list[PolicyTestResult]:
    sources = load_policy_sources(*write_policy({"p.rego": POLICY, "p_test.rego": TESTS}))
    return run_tests(sources, name_filter).results


def test_shipped_tests_all_pass(shipped: PolicySources) -> None:
    report = run_tests(shipped).results
    assert len(report) >= 15
    assert [r for r in report if not r.passed] == []
    assert format_report(report).splitlines() == [f"{len(report)} passed, 0 failed"]


def test_failures_are_reported_with_their_cause(write_policy: WritePolicy) -> None:
    results = {r.name: r for r in scratch_results(write_policy)}
    assert list(results) == [
        "toolgate.test.test_allows",
        "toolgate.test.test_wrongly_expects_deny",
        "toolgate.test.test_not_true",
        "toolgate.test.test_error",
        "toolgate.test.test_unknown_function",
    ]
    assert results["toolgate.test.test_allows"] == ("toolgate.test.test_allows", True, "")
    failed = results["toolgate.test.test_wrongly_expects_deny"]
    assert not failed.passed
    assert failed.message.startswith("undefined")
    assert "p_test.rego:9: decided allow" in failed.message
    assert results["toolgate.test.test_not_true"].message == "evaluated to 42, not true"
    assert "divide by zero" in results["toolgate.test.test_error"].message
    assert "nosuch.builtin" in results["toolgate.test.test_unknown_function"].message


def test_report_ends_with_the_count_line(write_policy: WritePolicy) -> None:
    report = format_report(scratch_results(write_policy))
    lines = report.splitlines()
    assert lines[-1] == "1 passed, 4 failed"
    assert lines[0].startswith("FAIL toolgate.test.test_wrongly_expects_deny: undefined")
    assert not any(line.startswith("PASS") for line in lines)


def test_verbose_report_lists_passing_tests(write_policy: WritePolicy) -> None:
    lines = format_report(scratch_results(write_policy), verbose=True).splitlines()
    assert lines[0] == "PASS toolgate.test.test_allows"
    assert len(lines) == 6


def test_name_filter(write_policy: WritePolicy) -> None:
    results = scratch_results(write_policy, "wrongly")
    assert [r.name for r in results] == ["toolgate.test.test_wrongly_expects_deny"]
    assert format_report(results).splitlines()[-1] == "0 passed, 1 failed"


def test_no_tests(write_policy: WritePolicy) -> None:
    sources = load_policy_sources(*write_policy({"p.rego": POLICY}))
    assert run_tests(sources).results == []
    assert format_report([]) == "0 passed, 0 failed"


def test_sources_regorus_cannot_load_are_a_config_error() -> None:
    broken = PolicySources((("x.rego", "package toolgate\ndecision := {\n"),), (), {})
    with pytest.raises(ConfigError, match=r"x\.rego"):
        run_tests(broken)


@pytest.mark.slow  # the tests run in a child process
def test_a_child_that_dies_fails_its_test_and_the_rest_go_on(write_policy: WritePolicy) -> None:
    """With a timeout the tests run in a forked child; killed (as the kernel's OOM killer
    would) while idle after the first test, it fails the second with the cause, and the third
    runs in a new child."""
    tests = "package t\n\ntest_one if true\n\ntest_two if true\n\ntest_three if true\n"
    sources = load_policy_sources(*write_policy({"p.rego": POLICY, "p_test.rego": tests}))
    killed: list[int] = []

    def kill_the_child(done: int, total: int) -> None:
        if done == 1:
            (child,) = multiprocessing.active_children()
            child.kill()
            child.join()
            killed.append(child.pid or 0)

    run = run_tests(sources, timeout=30, on_step=kill_the_child, coverage=True)
    assert killed and killed[0] not in {c.pid for c in multiprocessing.active_children()}
    assert run.results == [
        ("t.test_one", True, ""),
        ("t.test_two", False, "the process running it ended (exit status -9)"),
        ("t.test_three", True, ""),
    ]
    assert run.coverage == [
        "coverage: not available: t.test_two: the process running it ended (exit status -9)"
    ]
    assert multiprocessing.active_children() == []
