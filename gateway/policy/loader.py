"""Load the policy sources: Rego modules from ``rego/`` and policy data from ``policies/``.

Everything is checked at load, and every fault is collected into one ConfigError whose
messages name the file (and the line where there is one):

- each ``policies/*.yaml`` must be a mapping; its top-level keys are merged under
  ``data.toolgate``; a key defined in two files, a key that is not a string, a value that is
  not JSON (a date, a set, ``.nan``) or a key that collides with a rule of package ``toolgate``
  is refused;
- each ``rego/*.rego`` must parse, and the non-test modules must compile with the regorus
  compiler (``Program.compile_from_modules``) with every rule as an entry point, so that an
  unknown function or a recursion is reported now rather than at the first call; test modules
  (``*_test.rego``) use ``with``, which that compiler does not support, so they are only parsed
  here and fail in the test runner if they call an unknown function;
- some module must define ``data.toolgate.decision``.

This module also holds the small regorus helpers that the embedded backend, its input scan
(``gateway.policy.reads``) and the test runner share: ``engine_call`` (regorus panics are
BaseExceptions), ``list_rules`` and the syntax-tree readers ``syntax_tree``, ``rules_in_ast`` and
``ref_path``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import regorus

from gateway.errors import ConfigError
from gateway.yamlsrc import Lines, load_yaml

DATA_ROOT = "toolgate"
"""Policy data is mounted at ``data.toolgate``; the Rego package is ``toolgate`` too."""
DECISION_RULE = "data.toolgate.decision"
LISTING_RULE = "data.toolgate.listed"
"""Could the principal ever be allowed to call the tool (MCP tools/list)? Optional."""
TEST_SUFFIX = "_test.rego"

Module = tuple[str, str]
"""(file name, Rego text)."""

T = TypeVar("T")


@dataclass(frozen=True)
class PolicySources:
    """Checked policy sources; ``data`` is what is mounted under ``data.toolgate``."""

    modules: tuple[Module, ...]
    test_modules: tuple[Module, ...]
    data: dict[str, Any]
    warnings: tuple[str, ...] = ()
    """Faults that do not stop the gateway: a ``data.toolgate.*`` key the modules read that
    the data lacks (``file:line: ...``); ``toolgate check`` lists them."""
    lines: Mapping[str, Lines] = field(default_factory=dict)
    """The line index of the file each top-level key of ``data`` comes from, for errors
    that name the file, line and key (``gateway.policy.data``)."""

    def revision(self) -> str:
        """The policy revision: that of the bundle of these sources (``bundle.source_revision``,
        the ``.manifest``'s), a digest of the modules' file names and texts and of the data. It
        changes exactly when a decision could, and replicas reading the same files agree on
        it wherever their directories are (the decision log, events and ``/readyz`` name it)."""
        from gateway.policy.bundle import source_revision  # bundle imports this module

        return source_revision(self)

    def data_json(self) -> str:
        """The whole data document (``{"toolgate": data}``) as JSON."""
        return json.dumps({DATA_ROOT: self.data})


class EngineError(Exception):
    """A regorus call failed: an error it reported, or a panic (``panicked``)."""

    def __init__(self, message: str, *, panicked: bool = False) -> None:
        super().__init__(message)
        self.panicked = panicked


class RuleInfo(NamedTuple):
    """One rule (or function) head of a Rego module."""

    file: str
    line: int
    path: str  # "data.<package>.<rule>"
    function: bool


def load_policy_sources(rego_dir: Path, policies_dir: Path) -> PolicySources:
    """Read and check ``rego_dir/*.rego`` and ``policies_dir/*.yaml``; raise ConfigError."""
    with quiet_panics():
        return _load_policy_sources(rego_dir, policies_dir)


def _load_policy_sources(rego_dir: Path, policies_dir: Path) -> PolicySources:
    rego_problems: list[str] = []
    modules, test_modules = _read_modules(rego_dir, rego_problems)
    data_problems: list[str] = []
    data, key_lines, key_files = _read_data(policies_dir, data_problems)
    problems = rego_problems + data_problems
    if modules and not rego_problems:
        clean = {} if data_problems else data  # faulty data could make compiling fail too
        found, core, warnings = _check_modules(modules, test_modules, clean, key_lines)
        problems.extend(found)
        modules = core_first(modules, core)
    if problems:
        raise ConfigError(problems)
    return PolicySources(tuple(modules), tuple(test_modules), data, tuple(warnings), key_files)


def core_first(modules: list[Module], core: set[str]) -> list[Module]:
    """The modules that define the decision first, then the others, each group by name.

    Works around a regorus 0.13 fault: under ``with input as ...`` (every Rego unit test) it
    evaluates some rule bodies with the loop plans of the engine's first module, so an extra
    ``package toolgate`` module whose name sorted before ``toolgate.rego`` (``aa.rego`` with
    ``foo := 1``) made every shipped test undefined. With the decision's module first the
    result no longer depends on file names; every engine (gateway, tests, compile check) loads
    the modules in this order.
    """
    return sorted(modules, key=lambda m: (m[0] not in core, m[0]))


def engine_call(fn: Callable[..., T], *args: Any) -> T:
    """Call a regorus method; any failure, panics included, becomes an EngineError."""
    try:
        return fn(*args)
    except (KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except Exception as exc:
        raise EngineError(compact_message(exc)) from exc
    except BaseException as exc:  # a Rust panic is a BaseException (PanicException)
        raise EngineError(compact_message(exc), panicked=True) from exc


@contextmanager
def quiet_panics() -> Iterator[None]:
    """Keep Rust's panic report off stderr while regorus is used (load time, the CLI).

    The panic itself reaches Python as an exception and becomes a clear message
    (``engine_call``); the hook's own lines would only repeat it, once per attempt. File
    descriptor 2 goes to a temporary file meanwhile, and whatever else was written there is
    copied back afterwards: nothing is lost, only delayed. Not for the decision path, which
    runs while other threads may write.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as spool:
        os.dup2(spool.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            spool.seek(0)
            rest = _without_panic_reports(spool.read().decode("utf-8", "replace"))
            if rest.strip():
                sys.stderr.write(rest)
                sys.stderr.flush()


def _without_panic_reports(text: str) -> str:
    """``text`` without the reports of Rust's default panic hook (from "thread ... panicked"
    to its "note: ..." line)."""
    kept: list[str] = []
    in_report = after_report = False
    for line in text.splitlines(keepends=True):
        if line.startswith("thread '") and " panicked at " in line:
            in_report = True
        elif in_report and line.startswith("note: "):
            in_report, after_report = False, True
            continue
        if not in_report and not (after_report and not line.strip()):
            kept.append(line)
            after_report = False
    return "".join(kept)


def compact_message(exc: BaseException) -> str:
    """A one-line form of a regorus error: ``file:line:col: message`` when it has one.

    regorus nests errors ("Compilation error:" at the rule, then the real fault at the call):
    the first message that says more than a heading wins, with the position printed above
    it. A "Stack backtrace:" (RUST_LIB_BACKTRACE) and what follows are dropped.
    """
    text = str(exc).strip() or type(exc).__name__
    text = text.split("Stack backtrace:", 1)[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found: list[tuple[str | None, str]] = []
    where: str | None = None
    for line in lines:
        if line.startswith("-->"):
            where = line[3:].strip()
        elif line.startswith("error:"):
            found.append((where, line[6:].strip()))
    if not found:
        return lines[0][:500] if lines else type(exc).__name__
    where, what = next(((w, m) for w, m in found if m and not m.endswith(":")), found[0])
    return f"{where}: {what}"[:500] if where else what[:500]


def new_engine(modules: Iterable[Module], data_json: str) -> Any:
    """A regorus Engine holding ``modules`` and the data; bound to the calling thread."""
    engine = regorus.Engine()
    for name, text in modules:
        engine_call(engine.add_policy, name, text)
    engine_call(engine.add_data_json, data_json)
    return engine


def compile_program(modules: Iterable[Module], data_json: str, entry_points: list[str]) -> Any:
    """A compiled regorus Program (bound to the calling thread)."""
    return engine_call(regorus.Program.compile_from_modules, data_json, list(modules), entry_points)


def list_rules(engine: Any) -> list[RuleInfo]:
    """Every rule and function head of the modules loaded in ``engine``, in file order."""
    return rules_in_ast(syntax_tree(engine))


def defines(engine: Any, path: str) -> bool:
    """Whether a module loaded in ``engine`` defines the rule ``path`` (``data.pkg.rule``),
    not a function of that name."""
    return any(r.path == path and not r.function for r in list_rules(engine))


def syntax_tree(engine: Any) -> list[dict[str, Any]]:
    """The modules loaded in ``engine`` as regorus's syntax tree (one dict per module)."""
    modules: list[dict[str, Any]] = json.loads(engine_call(engine.get_ast_as_json))
    return modules


def rules_in_ast(modules: Iterable[Mapping[str, Any]]) -> list[RuleInfo]:
    """Every rule and function head of the modules of a syntax tree, in file order."""
    found: list[RuleInfo] = []
    for module in modules:
        file = module["source"]["file"]
        package = ref_path(module["ast"]["package"]["refr"])
        for rule in module["ast"]["rules"]:
            info = _rule_info(file, package, rule)
            if info is not None:
                found.append(info)
    return found


# --- reading ----------------------------------------------------------------------------------


def _read_modules(rego_dir: Path, problems: list[str]) -> tuple[list[Module], list[Module]]:
    if not rego_dir.is_dir():
        problems.append(f"{rego_dir}: the Rego directory does not exist")
        return [], []
    modules: list[Module] = []
    tests: list[Module] = []
    for path in sorted(rego_dir.glob("*.rego")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot read: {exc}")
            continue
        (tests if path.name.endswith(TEST_SUFFIX) else modules).append((str(path), text))
    if not modules and not problems:
        problems.append(f"{rego_dir}: no policy modules (*.rego other than *{TEST_SUFFIX})")
    return modules, tests


def _read_data(
    policies_dir: Path, problems: list[str]
) -> tuple[dict[str, Any], dict[str, str], dict[str, Lines]]:
    """Merged top-level keys, where each was defined (``file:line``) and its file's lines."""
    data: dict[str, Any] = {}
    where: dict[str, str] = {}
    files_of: dict[str, Lines] = {}
    if not policies_dir.is_dir():
        problems.append(f"{policies_dir}: the policy data directory does not exist")
        return data, where, files_of
    files = sorted(p for p in policies_dir.iterdir() if p.suffix in (".yaml", ".yml"))
    for path in sorted(policies_dir.glob("*.json")):  # OPA's data.json: never read in silence
        problems.append(
            f"{path}: policy data is read from *.yaml and *.yml only, so this file would be"
            " ignored; rename it to .yaml (JSON indented with spaces is YAML) or convert it"
        )
    for path in files:
        try:
            raw, lines = load_yaml(path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if raw is None:
            continue
        if not isinstance(raw, dict):
            problems.append(f"{path}:1: policy data must be a mapping of top-level keys")
            continue
        problems.extend(_json_problems(raw, (), lines))
        for key, value in raw.items():
            here = f"{path}:{lines.line((key,))}"
            if key in where:
                problems.append(f"{here}: {key}: already defined at {where[key]}")
                continue
            data[key] = value
            where[key] = here
            files_of[key] = lines
    return data, where, files_of


def _json_problems(value: Any, loc: tuple[str | int, ...], lines: Lines) -> Iterator[str]:
    """Keys that are not strings and values JSON cannot carry, each with file, line and key."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                yield f"{lines.where((*loc, str(key)))}: the key must be a string (quote it)"
                continue
            yield from _json_problems(item, (*loc, key), lines)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _json_problems(item, (*loc, i), lines)
    elif isinstance(value, float) and not math.isfinite(value):
        yield f"{lines.where(loc)}: {value} is not a JSON number"
    elif value is not None and not isinstance(value, str | int | float | bool):
        kind = type(value).__name__
        yield f"{lines.where(loc)}: a {kind} is not JSON (quote it if it is meant as text)"


# --- checking -----------------------------------------------------------------------------------


def _check_modules(
    modules: list[Module], tests: list[Module], data: dict[str, Any], key_lines: dict[str, str]
) -> tuple[list[str], set[str], list[str]]:
    """The problems, the files that define the decision, and the warnings."""
    from gateway.policy.reads import data_reads, missing_data  # reads imports this module

    engine = regorus.Engine()
    problems = [
        f"{name}: does not parse: {exc}"
        for name, text in (*modules, *tests)
        if (exc := _add_policy(engine, name, text)) is not None
    ]
    if problems:
        return problems, set(), []
    try:
        tree = syntax_tree(engine)
    except EngineError as exc:
        return [f"{modules[0][0]}: cannot read the syntax tree: {exc}"], set(), []
    rules = rules_in_ast(tree)
    policy_files = {name for name, _ in modules}
    policy_rules = [r for r in rules if r.file in policy_files]
    defined = {r.path for r in rules} | {
        ".".join(["data", *ref_path(m["ast"]["package"]["refr"])]) for m in tree
    }
    policy_tree = [m for m in tree if m["source"]["file"] in policy_files]
    warnings = missing_data(data_reads(policy_tree), data, DATA_ROOT, defined)
    problems.extend(_data_conflicts(policy_rules, key_lines))
    core = {r.file for r in policy_rules if r.path == DECISION_RULE}
    if not core:
        problems.append(f"{modules[0][0]}: no module defines {DECISION_RULE}")
    data_json = json.dumps({DATA_ROOT: data})
    problems.extend(_compile_problems(core_first(modules, core), data_json, policy_rules))
    return problems, core, warnings


def _add_policy(engine: Any, name: str, text: str) -> str | None:
    try:
        engine_call(engine.add_policy, name, text)
    except EngineError as exc:
        return str(exc)
    return None


def _data_conflicts(rules: list[RuleInfo], key_lines: dict[str, str]) -> Iterator[str]:
    """Data keys that would share a name with a rule under ``data.toolgate``."""
    prefix = f"data.{DATA_ROOT}."
    reported: set[str] = set()
    for rule in rules:
        if not rule.path.startswith(prefix):
            continue
        key = rule.path[len(prefix) :].split(".", 1)[0]
        if key in key_lines and key not in reported:
            reported.add(key)
            yield (
                f"{key_lines[key]}: {key}: the data key collides with the rule "
                f"{prefix}{key} ({rule.file}:{rule.line}); rename one of them"
            )


def _compile_problems(modules: list[Module], data_json: str, rules: list[RuleInfo]) -> list[str]:
    entry_points = sorted({r.path for r in rules})
    try:
        compile_program(modules, data_json, entry_points)
    except EngineError as exc:
        error = str(exc)
        if exc.panicked:  # e.g. "Register overflow": a rule body too big for the compiler
            error += " (the regorus compiler gave up: split the rule into smaller rules)"
        return [_attribute(modules, data_json, rules, error)]
    return []


def _attribute(modules: list[Module], data_json: str, rules: list[RuleInfo], error: str) -> str:
    """Name the file of a compile error; the compiler names it only for some errors."""
    for name, _ in modules:
        if error.startswith(f"{name}:"):
            return f"{name}: does not compile: {error}"
    for rule in rules:  # find the first rule whose own compilation fails
        try:
            compile_program(modules, data_json, [rule.path])
        except EngineError:
            return f"{rule.file}:{rule.line}: {rule.path} does not compile: {error}"
    names = ", ".join(name for name, _ in modules)
    return f"{names}: do not compile: {error}"


# --- the syntax tree ------------------------------------------------------------------------------


def _rule_info(file: str, package: list[str], rule: dict[str, Any]) -> RuleInfo | None:
    if "Default" in rule:
        node, function = rule["Default"], False
    elif "Spec" in rule:
        kind, head = next(iter(rule["Spec"]["head"].items()))
        node, function = {**head, "span": rule["Spec"]["span"]}, kind == "Func"
    else:
        return None
    path = ".".join(["data", *package, *ref_path(node["refr"])])
    return RuleInfo(file, int(node["span"]["line"]), path, function)


def ref_path(ref: Mapping[str, Any]) -> list[str]:
    """``a.b.c`` of a package, import or rule head; a bracket (``p[k]``) ends the path."""
    kind, node = next(iter(ref.items()))
    if kind == "Var":
        return [str(node["value"])]
    if kind == "RefDot":
        return [*ref_path(node["refr"]), str(node["field"][1])]
    if kind == "RefBrack":
        return ref_path(node["refr"])
    raise EngineError(f"unexpected reference in a rule head: {kind}")
