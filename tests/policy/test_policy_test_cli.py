"""``toolgate policy test`` as ``opa test`` users know it: --run, --fail-on-empty, -v, todo_
rules, and the rules of the decision no test reached (--coverage). Run as a real process."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.policy.helpers import REPO, toolgate

pytestmark = pytest.mark.slow  # every test here starts a process itself

POLICY = """\
package toolgate

decision := {"result": "deny", "reasons": sort(deny_reasons)} if {
	count(deny_reasons) > 0
} else := {"result": "allow", "reasons": ["ok"]}

deny_reasons contains "a is one" if {
	input.a == 1
}

deny_reasons contains "b is big" if {
	input.b > 10
	big(input.b)
}

deny_reasons contains "c is set" if {
	is_c
}

is_c if {
	input.c == true
}

big(x) if x > 100

unused := 3
"""

TESTS = """\
package toolgate_test

import data.toolgate

test_a_denies if {
	toolgate.decision.result == "deny" with input as {"a": 1}
}

test_nothing_allows if {
	toolgate.decision.result == "allow" with input as {}
}

todo_b_denies if {
	toolgate.decision.result == "deny" with input as {"b": 1000}
}
"""


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "rego").mkdir()
    (tmp_path / "policies").mkdir()
    (tmp_path / "rego" / "p.rego").write_text(POLICY)
    (tmp_path / "rego" / "p_test.rego").write_text(TESTS)
    return tmp_path


def test_run_selects_by_regular_expression(scratch: Path) -> None:
    done = toolgate("policy", "test", "--run", r"^toolgate_test\.test_a", "-v", cwd=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["PASS toolgate_test.test_a_denies", "1 passed, 0 failed"]
    both = toolgate("policy", "test", "--run", "denies$|allows$", "-v", cwd=scratch)
    assert both.stdout.splitlines() == [
        "PASS toolgate_test.test_a_denies",
        "PASS toolgate_test.test_nothing_allows",
        "SKIP toolgate_test.todo_b_denies (todo)",
        "2 passed, 0 failed, 1 skipped",
    ]


def test_a_bad_regular_expression_is_a_usage_error(scratch: Path) -> None:
    done = toolgate("policy", "test", "--run", "(", cwd=scratch)
    assert done.returncode == 2
    assert done.stderr.startswith("toolgate: --run '(': not a regular expression: ")
    assert "Traceback" not in done.stderr


def test_todo_rules_are_skipped_not_run(scratch: Path) -> None:
    """A todo_ rule that would fail does not fail the run: it is not evaluated."""
    test_file = scratch / "rego" / "p_test.rego"
    test_file.write_text(TESTS + "\ntodo_broken if {\n\t1 == 2\n}\n")
    done = toolgate("policy", "test", cwd=scratch)
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines() == ["2 passed, 0 failed, 2 skipped"]
    only_todo = toolgate("policy", "test", "--run", "todo_", "--fail-on-empty", cwd=scratch)
    assert only_todo.returncode == 1
    assert only_todo.stdout.splitlines() == ["0 passed, 0 failed, 2 skipped"]
    assert only_todo.stderr == "toolgate: no test ran\n"


def test_fail_on_empty(scratch: Path) -> None:
    done = toolgate("policy", "test", "--run", "no such test", "--fail-on-empty", cwd=scratch)
    assert done.returncode == 1
    assert done.stdout == "0 passed, 0 failed\n"
    assert done.stderr == "toolgate: no test ran\n"


def test_coverage_names_the_rules_of_the_decision_no_test_reached(scratch: Path) -> None:
    done = toolgate("policy", "test", "--coverage", cwd=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    policy = scratch / "rego" / "p.rego"
    rules = [line for line in done.stdout.splitlines() if line.startswith("coverage: rules")]
    assert rules == ["coverage: rules of data.toolgate.decision: 3 of 6 definitions reached"]
    unreached = [line for line in done.stdout.splitlines() if "not reached" in line]
    # b (no test gets past its first condition), c (is_c never holds) and big (never called);
    # is_c has no value, so its evaluated condition counts (docs/policies.md); unused is no
    # rule of the decision, and todo_b_denies, which would reach b and big, is not run.
    assert unreached == [
        f"coverage: {policy}:11: data.toolgate.deny_reasons: not reached by any test",
        f"coverage: {policy}:16: data.toolgate.deny_reasons: not reached by any test",
        f"coverage: {policy}:24: data.toolgate.big: not reached by any test",
    ]


def test_a_test_for_a_rule_reaches_it(scratch: Path) -> None:
    test_file = scratch / "rego" / "p_test.rego"
    test_file.write_text(
        TESTS
        + textwrap.dedent("""
            test_c_denies if {
            \ttoolgate.decision.reasons == ["c is set"] with input as {"c": true}
            }
            """)
    )
    done = toolgate("policy", "test", "--coverage", cwd=scratch)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "coverage: rules of data.toolgate.decision: 4 of 6 definitions reached" in done.stdout
    assert [line.split(": ")[1] for line in done.stdout.splitlines() if "not reached" in line] == [
        f"{scratch / 'rego' / 'p.rego'}:11",
        f"{scratch / 'rego' / 'p.rego'}:24",
    ]


def test_the_shipped_tests_reach_every_rule_of_the_decision() -> None:
    done = toolgate("policy", "test", "--coverage", cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert [line for line in lines if "not reached" in line] == []
    assert any(
        line.startswith("coverage: rules of data.toolgate.decision: ")
        and line.split(": ")[-1].split()[0] == line.split(": ")[-1].split()[2]
        for line in lines
    ), lines


def test_one_test_leaves_the_refusals_unreached() -> None:
    done = toolgate(
        "policy", "test", "--coverage", "--run", "test_member_agent_may_write_in_demo$", cwd=REPO
    )
    assert done.returncode == 0, done.stdout + done.stderr
    unreached = [line for line in done.stdout.splitlines() if "not reached" in line]
    assert unreached and all(
        any(f".{rule}" in line for rule in ("deny_reasons:", "standing_refusals:", "approval"))
        or ".is_approver:" in line
        for line in unreached
    ), unreached
    rego = REPO / "rego" / "toolgate.rego"
    first = next(
        n
        for n, text in enumerate(rego.read_text().splitlines(), 1)
        if text.startswith("deny_reasons contains")
    )
    assert f"{rego}:{first}: data.toolgate.deny_reasons" in unreached[0]


def test_fail_under_fails_below_the_share_of_rules_reached(scratch: Path) -> None:
    """The scratch tests (all passing) reach 3 of the decision's 6 rule definitions (50%):
    --fail-under 50 passes, 51 fails (exit 1), and the verdict is printed."""
    ok = toolgate("policy", "test", "--fail-under", "50", cwd=scratch)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    total = [line for line in ok.stdout.splitlines() if line.startswith("coverage: total: ")]
    assert len(total) == 1 and "50.0% of the decision's rule definitions (3 of 6)" in total[0]
    assert total[0].endswith("--fail-under 50: ok")
    short = toolgate("policy", "test", "--fail-under", "51", cwd=scratch)
    assert short.returncode == 1, short.stdout + short.stderr
    assert short.stdout.startswith("2 passed, 0 failed")
    assert short.stdout.splitlines()[-1].endswith("--fail-under 51: rules below it")
    bad = toolgate("policy", "test", "--fail-under", "101", cwd=scratch)
    assert bad.returncode == 2
    assert bad.stderr == "toolgate: --fail-under 101: must be a percentage, 0 to 100\n"


def test_the_shipped_tests_pass_fail_under_100() -> None:
    done = toolgate("policy", "test", "--coverage", "--fail-under", "100", cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("coverage: total: 100.0% of lines")


LOOPS = """
test_loops if {
\tsome i in numbers.range(1, 100000)
\tsome j in numbers.range(1, 100000)
\ti + j == 0
}

test_after_the_loop if {
\ttoolgate.decision.result == "allow" with input as {}
}
"""
"""Ten billion pairs, none equal: a test that runs for hours in memory that does not grow."""


def test_a_test_that_loops_runs_out_of_time_by_default(scratch: Path) -> None:
    """Without --timeout each test gets 5 s: the looping one fails, named, the tests after it
    still run, and the coverage (lost with the killed child) says so; no stack trace."""
    (scratch / "rego" / "p_test.rego").write_text(TESTS + LOOPS)
    done = toolgate("policy", "test", "-v", "--coverage", cwd=scratch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines()[:6] == [
        "PASS toolgate_test.test_a_denies",
        "PASS toolgate_test.test_nothing_allows",
        "FAIL toolgate_test.test_loops: ran out of time: still running after 5s (--timeout)",
        "PASS toolgate_test.test_after_the_loop",
        "SKIP toolgate_test.todo_b_denies (todo)",
        "3 passed, 1 failed, 1 skipped",
    ]
    assert done.stdout.splitlines()[6:] == [
        "coverage: not available: toolgate_test.test_loops: ran out of time: still running "
        "after 5s (--timeout)"
    ]
    assert done.stderr == ""


def test_timeout_sets_the_bound(scratch: Path) -> None:
    (scratch / "rego" / "p_test.rego").write_text(TESTS + LOOPS)
    done = toolgate("policy", "test", "--run", "loops", "--timeout", "500ms", cwd=scratch)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "FAIL toolgate_test.test_loops: ran out of time: still running after 0.5s (--timeout)",
        "0 passed, 1 failed",
    ]
    assert done.stderr == ""


@pytest.mark.parametrize(
    ("value", "why"), [("0", "a duration must be positive"), ("soon", "'soon' is not a duration")]
)
def test_a_bad_timeout_is_a_usage_error(scratch: Path, value: str, why: str) -> None:
    done = toolgate("policy", "test", "--timeout", value, cwd=scratch)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"toolgate: --timeout {value!r}: {why}")
