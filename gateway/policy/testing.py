"""Run the Rego unit tests (``rego/*_test.rego``), OPA style.

A test is a rule named ``test_*`` (not a function) of a test module; ``todo_*`` rules are
skipped (``opa test`` conventions). It passes when
``data.<package>.<rule>`` evaluates to ``true``; undefined, any other value, or an error fails
it, with the cause. All modules and the policy data are loaded, so a test may use
``with input as ...`` and ``with data.toolgate.<key> as ...``.

A test's time can be bounded (``timeout``; ``toolgate policy test --timeout``): regorus holds
the GIL for a whole evaluation and has no deadline of its own, so nothing in this process could
stop a test that loops (a comprehension over a huge ``numbers.range``, a deep ``walk``). With a
``timeout`` the tests therefore run one at a time in a forked child process holding a copy of
the engine; a test that gives no answer in time fails as out of time, the child is killed, and
the remaining tests go on in a new one.
"""

from __future__ import annotations

import json
import multiprocessing
import re
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from gateway.errors import ConfigError
from gateway.policy.coverage import decision_rules, unreached
from gateway.policy.loader import (
    DECISION_RULE,
    EngineError,
    PolicySources,
    engine_call,
    list_rules,
    new_engine,
    quiet_panics,
    syntax_tree,
)
from gateway.types import OnStep

TEST_PREFIX = "test_"
TODO_PREFIX = "todo_"
"""A rule named ``todo_*`` is a test written down but not ready: reported skipped, never run."""


class PolicyTestResult(NamedTuple):
    """The outcome of one Rego test."""

    name: str  # "<package>.<rule>", e.g. "toolgate_test.test_alice_may_write"
    passed: bool
    message: str  # why it failed ("" when it passed)


class CoverageTotals(NamedTuple):
    """The policy modules' lines the tests evaluated, of those the engine can mark, and the
    decision's rule definitions they reached (what ``--fail-under`` compares)."""

    lines_covered: int
    lines: int
    rules_reached: int
    rules: int

    @property
    def lines_percent(self) -> float:
        return 100.0 * self.lines_covered / self.lines if self.lines else 100.0

    @property
    def rules_percent(self) -> float:
        return 100.0 * self.rules_reached / self.rules if self.rules else 100.0

    def below(self, percent: float) -> list[str]:
        """What falls short of ``percent``: ``lines`` and/or ``rules``."""
        shares = (("lines", self.lines_percent), ("rules", self.rules_percent))
        return [name for name, share in shares if share < percent]

    def line(self, percent: float | None = None) -> str:
        """``coverage: total: ...`` with the verdict of ``--fail-under percent`` when given."""
        out = (
            f"coverage: total: {self.lines_percent:.1f}% of lines "
            f"({self.lines_covered} of {self.lines}), {self.rules_percent:.1f}% of the "
            f"decision's rule definitions ({self.rules_reached} of {self.rules})"
        )
        if percent is None:
            return out
        short = self.below(percent)
        verdict = "ok" if not short else f"{' and '.join(short)} below it"
        return f"{out}; --fail-under {percent:g}: {verdict}"


class PolicyTestRun(NamedTuple):
    """What ``run_tests`` did: the results, the ``todo_`` rules skipped, and (``coverage``)
    the coverage lines and totals (None when the engine could not report them)."""

    results: list[PolicyTestResult]
    skipped: list[str]
    coverage: list[str]
    totals: CoverageTotals | None = None


def run_tests(
    sources: PolicySources,
    name_filter: str | None = None,
    pattern: re.Pattern[str] | None = None,
    *,
    coverage: bool = False,
    on_step: OnStep | None = None,
    timeout: float | None = None,
) -> PolicyTestRun:
    """Run the tests whose name contains ``name_filter`` and matches ``pattern`` (``re.search``,
    like ``opa test --run``); the ``todo_`` rules they select are skipped, not run.

    With ``coverage``: one line per policy module (not the tests), how many of its lines that
    the engine can cover the selected tests evaluated and which they did not; then the rules of
    the decision (``gateway.policy.coverage``) and each one no selected test reached, at its
    ``file:line``. ``on_step`` is called after each test.

    ``timeout``: the seconds each test may run, in a child process (the module docstring); a
    test that runs out fails, and the coverage is then not reported (what the killed child had
    counted is lost). None runs them in this process, unbounded.
    """
    try:
        with quiet_panics():
            engine = new_engine((*sources.modules, *sources.test_modules), sources.data_json())
            engine_call(engine.set_gather_prints, True)
            if coverage:
                engine_call(engine.set_enable_coverage, True)
    except EngineError as exc:
        raise ConfigError(f"policy tests: regorus cannot load the sources: {exc}") from exc
    selected = [
        name
        for name in discover_tests(engine, sources, (TEST_PREFIX, TODO_PREFIX))
        if (not name_filter or name_filter in name) and (not pattern or pattern.search(name))
    ]
    skipped = [name for name in selected if _short(name).startswith(TODO_PREFIX)]
    to_run = [name for name in selected if name not in skipped]
    runner = _Here(engine, sources) if timeout is None else _Child(engine, sources, timeout)
    try:
        results = []
        for name in to_run:
            results.append(runner.run(name))
            if on_step is not None:
                on_step(len(results), len(to_run))
        if not coverage:
            return PolicyTestRun(results, skipped, [])
        return PolicyTestRun(results, skipped, *runner.coverage())
    finally:
        runner.close()


_Coverage = tuple[list[str], CoverageTotals | None]


class _Here:
    """The tests run in this process, unbounded."""

    def __init__(self, engine: Any, sources: PolicySources) -> None:
        self._engine, self._sources = engine, sources

    def run(self, name: str) -> PolicyTestResult:
        return _run_one(self._engine, name)

    def coverage(self) -> _Coverage:
        return _coverage(self._engine, self._sources)

    def close(self) -> None:
        return None


class _Child:
    """The tests run one at a time in a forked child, each given ``timeout`` seconds to
    answer; a child that does not is killed, and the next test gets a new one."""

    def __init__(self, engine: Any, sources: PolicySources, timeout: float) -> None:
        self._engine, self._sources, self._timeout = engine, sources, timeout
        self._worker: tuple[Any, Connection] | None = None
        self._lost: str | None = None  # why the coverage is not known

    def run(self, name: str) -> PolicyTestResult:
        try:
            result: PolicyTestResult = self._ask(name)
        except _NoAnswer as exc:
            self._lost = f"{name}: {exc}"
            return PolicyTestResult(name, False, str(exc))
        return result

    def coverage(self) -> _Coverage:
        if self._lost is None:
            try:
                answer: _Coverage = self._ask(None)
            except _NoAnswer as exc:
                self._lost = f"counting it: {exc}"
            else:
                return answer
        return [f"coverage: not available: {self._lost}"], None

    def _ask(self, name: str | None) -> Any:
        """The child's answer; _NoAnswer (and the child killed) when it gives none."""
        if self._worker is None:
            self._worker = _start(self._engine, self._sources)
        process, connection = self._worker
        try:
            connection.send(name)
            if connection.poll(self._timeout):
                return connection.recv()
        except (EOFError, OSError) as exc:  # the child died: killed, out of memory
            self.close()
            raise _NoAnswer(
                f"the process running it ended (exit status {process.exitcode})"
            ) from exc
        self.close()
        raise _NoAnswer(f"ran out of time: still running after {self._timeout:g}s (--timeout)")

    def close(self) -> None:
        """Kill the child rather than ask it to exit: it may have been forked while another
        thread (a progress line) held a lock that its exit would wait for."""
        if self._worker is not None:
            process, connection = self._worker
            self._worker = None
            process.kill()
            process.join()
            connection.close()


class _NoAnswer(Exception):
    """The child gave no answer (the message says why)."""


def _start(engine: Any, sources: PolicySources) -> tuple[Any, Connection]:
    """A forked child holding a copy of ``engine`` (fork copies the calling thread, the one the
    engine is bound to), answering over the connection returned."""
    fork = multiprocessing.get_context("fork")
    here, there = fork.Pipe()
    process = fork.Process(target=_serve, args=(engine, sources, there), daemon=True)
    process.start()
    there.close()
    return process, here


def _serve(engine: Any, sources: PolicySources, connection: Connection) -> None:
    """In the child: for each test name received its result, for None the coverage; until the
    parent goes away."""
    try:
        while True:
            name = connection.recv()
            answer = _run_one(engine, name) if name is not None else _coverage(engine, sources)
            connection.send(answer)
    except (EOFError, OSError):
        return


def _coverage(engine: Any, sources: PolicySources) -> _Coverage:
    try:
        report = json.loads(engine_call(engine.get_coverage_report_as_json))
    except (EngineError, ValueError) as exc:
        return [f"coverage: not available: {exc}"], None
    policy_files = {name for name, _ in sources.modules}
    lines: list[str] = []
    covered_lines = all_lines = 0
    for entry in report.get("files", []):
        if entry.get("path") not in policy_files:
            continue
        covered, missed = entry.get("covered") or [], entry.get("not_covered") or []
        total = len(covered) + len(missed)
        covered_lines, all_lines = covered_lines + len(covered), all_lines + total
        line = f"coverage: {entry['path']}: {len(covered)} of {total} lines"
        if missed:
            line += " (not evaluated: " + ", ".join(str(n) for n in sorted(missed)) + ")"
        lines.append(line)
    rule_lines, reached = _rule_coverage(engine, policy_files, report)
    if reached is None:
        return lines + rule_lines, None
    return lines + rule_lines, CoverageTotals(covered_lines, all_lines, *reached)


def _rule_coverage(
    engine: Any, policy_files: set[str], report: dict[str, Any]
) -> tuple[list[str], tuple[int, int] | None]:
    try:
        tree = [m for m in syntax_tree(engine) if m["source"]["file"] in policy_files]
    except EngineError as exc:
        return [f"coverage: rules: not available: {exc}"], None
    rules = decision_rules(tree)
    missed = unreached(rules, report)
    lines = [
        f"coverage: rules of {DECISION_RULE}: {len(rules) - len(missed)} of {len(rules)} "
        "definitions reached"
    ]
    lines.extend(f"coverage: {r.file}:{r.line}: {r.path}: not reached by any test" for r in missed)
    return lines, (len(rules) - len(missed), len(rules))


def discover_tests(
    engine: Any, sources: PolicySources, prefixes: tuple[str, ...] = (TEST_PREFIX,)
) -> list[str]:
    """Names (``package.rule``) of the tests (rules named with one of ``prefixes``) in the test
    modules loaded in ``engine``."""
    test_files = {name for name, _ in sources.test_modules}
    names: list[str] = []
    for rule in list_rules(engine):
        short = rule.path.removeprefix("data.")
        if (
            rule.file in test_files
            and not rule.function
            and _short(short).startswith(prefixes)
            and short not in names
        ):
            names.append(short)
    return names


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def format_report(
    results: Sequence[PolicyTestResult], verbose: bool = False, skipped: Sequence[str] = ()
) -> str:
    """One line per failed test (per test, and per skipped ``todo_`` rule, when ``verbose``),
    then ``N passed, N failed`` (``, N skipped`` when some were)."""
    lines = [
        f"PASS {r.name}" if r.passed else f"FAIL {r.name}: {r.message}"
        for r in results
        if verbose or not r.passed
    ]
    if verbose:
        lines.extend(f"SKIP {name} (todo)" for name in skipped)
    passed = sum(1 for r in results if r.passed)
    count = f"{passed} passed, {len(results) - passed} failed"
    lines.append(count + (f", {len(skipped)} skipped" if skipped else ""))
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
