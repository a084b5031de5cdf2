"""Run the Rego unit tests (``rego/*_test.rego``), OPA style.

A test is a rule named ``test_*`` (not a function) of a test module. It passes when
``data.<package>.<rule>`` evaluates to ``true``; undefined, any other value, or an error fails
it, with the cause. All modules and the policy data are loaded, so a test may use
``with input as ...`` and ``with data.toolgate.<key> as ...``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from gateway.errors import ConfigError
from gateway.policy.loader import (
    EngineError,
    PolicySources,
    engine_call,
    list_rules,
    new_engine,
    quiet_panics,
)

TEST_PREFIX = "test_"


class PolicyTestResult(NamedTuple):
    """The outcome of one Rego test."""

    name: str  # "<package>.<rule>", e.g. "toolgate_test.test_alice_may_write"
    passed: bool
    message: str  # why it failed ("" when it passed)


def run_policy_tests(
    sources: PolicySources, name_filter: str | None = None
) -> list[PolicyTestResult]:
    """Run every test whose name contains ``name_filter`` (all when None), in file order.

    Raises ConfigError if regorus cannot load the sources at all.
    """
    return run_with_coverage(sources, name_filter, coverage=False)[0]


def run_with_coverage(
    sources: PolicySources, name_filter: str | None = None, *, coverage: bool = True
) -> tuple[list[PolicyTestResult], list[str]]:
    """``run_policy_tests``, and (``coverage``) one line per policy module (not the tests):
    how many of its lines that the engine can cover the selected tests evaluated, and which
    they did not."""
    try:
        with quiet_panics():
            engine = new_engine((*sources.modules, *sources.test_modules), sources.data_json())
            engine_call(engine.set_gather_prints, True)
            if coverage:
                engine_call(engine.set_enable_coverage, True)
    except EngineError as exc:
        raise ConfigError(f"policy tests: regorus cannot load the sources: {exc}") from exc
    results = [
        _run_one(engine, name)
        for name in discover_tests(engine, sources)
        if not name_filter or name_filter in name
    ]
    return results, (_coverage(engine, sources) if coverage else [])


def _coverage(engine: Any, sources: PolicySources) -> list[str]:
    try:
        report = json.loads(engine_call(engine.get_coverage_report_as_json))
    except (EngineError, ValueError) as exc:
        return [f"coverage: not available: {exc}"]
    policy_files = {name for name, _ in sources.modules}
    lines: list[str] = []
    for entry in report.get("files", []):
        if entry.get("path") not in policy_files:
            continue
        covered, missed = entry.get("covered") or [], entry.get("not_covered") or []
        total = len(covered) + len(missed)
        line = f"coverage: {entry['path']}: {len(covered)} of {total} lines"
        if missed:
            line += " (not evaluated: " + ", ".join(str(n) for n in sorted(missed)) + ")"
        lines.append(line)
    return lines


def discover_tests(engine: Any, sources: PolicySources) -> list[str]:
    """Names (``package.rule``) of the tests in the test modules loaded in ``engine``."""
    test_files = {name for name, _ in sources.test_modules}
    names: list[str] = []
    for rule in list_rules(engine):
        short = rule.path.removeprefix("data.")
        if (
            rule.file in test_files
            and not rule.function
            and short.rsplit(".", 1)[-1].startswith(TEST_PREFIX)
            and short not in names
        ):
            names.append(short)
    return names


def format_report(results: Sequence[PolicyTestResult], verbose: bool = False) -> str:
    """One line per failed test (per test when ``verbose``), then ``N passed, N failed``."""
    lines = [
        f"PASS {r.name}" if r.passed else f"FAIL {r.name}: {r.message}"
        for r in results
        if verbose or not r.passed
    ]
    passed = sum(1 for r in results if r.passed)
    lines.append(f"{passed} passed, {len(results) - passed} failed")
    return "\n".join(lines)


def _run_one(engine: Any, name: str) -> PolicyTestResult:
    try:
        value: Any = json.loads(engine_call(engine.eval_rule_as_json, f"data.{name}"))
    except EngineError as exc:
        return PolicyTestResult(name, False, f"error: {exc}{_prints(engine)}")
    printed = _prints(engine)
    if value is True:
        return PolicyTestResult(name, True, "")
    if value == "<undefined>":
        why = "undefined (some expression in its body is false or undefined)"
    else:
        why = f"evaluated to {json.dumps(value)[:200]}, not true"
    return PolicyTestResult(name, False, why + printed)


def _prints(engine: Any) -> str:
    try:
        printed = engine_call(engine.take_prints)
    except EngineError:
        return ""
    return f" (printed: {'; '.join(printed)})" if printed else ""
