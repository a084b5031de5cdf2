"""Extending the shipped policy from other modules, module order, and clear load failures.

The shipped policy's `deny_reasons` and `approval_reasons` are partial sets that any module of
package `toolgate` may add to (docs/policies.md, docs/tasks/first-rule.md).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import load_policy_sources
from gateway.policy.testing import run_tests
from tests.policy.helpers import REPO, make_input

EXTENSION = """\
package toolgate

# A secret file is never touched, whatever the tool.
deny_reasons contains msg if {
	some p in input.paths
	some suffix in data.toolgate.secret_files.suffixes
	endswith(p.relative, suffix)
	msg := sprintf("argument '%v' names a secret file (rule: secret_files.suffixes)", [p.argument])
}

# Writes under prod/ need a person.
approval_reasons contains msg if {
	input.tool.side_effect == "write"
	some p in input.paths
	startswith(p.relative, "prod/")
	msg := sprintf("tool %v writes under prod/ (rule: prod_writes)", [call.tool])
}
"""

EXTENSION_TESTS = """\
package extension_test

import data.toolgate
import data.toolgate_test

test_secret_file_denied if {
	d := toolgate.decision with input as toolgate_test.call([toolgate_test.path("k.pem", true)])
	d.result == "deny"
	toolgate_test.reasons_mention(d, "rule: secret_files.suffixes")
}

test_prod_write_needs_approval if {
	d := toolgate.decision with input as toolgate_test.call([toolgate_test.path("prod/x", true)])
	d.result == "require_approval"
}

test_other_writes_still_allowed if {
	d := toolgate.decision with input as toolgate_test.call([toolgate_test.path("notes/x", true)])
	d.result == "allow"
}
"""

SECRET_DATA = "secret_files:\n  suffixes: [.pem, .key]\n"


def project_copy(root: Path, extra: dict[str, str], data: dict[str, str] | None = None) -> Path:
    """The shipped project (tools, rego, policies, config) under ``root``, plus ``extra`` files
    in rego/ and ``data`` files in policies/."""
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "toolgate.yaml", root / "toolgate.yaml")
    for name, text in extra.items():
        (root / "rego" / name).write_text(text, encoding="utf-8")
    for name, text in (data or {}).items():
        (root / "policies" / name).write_text(text, encoding="utf-8")
    return root


def decide(root: Path, document: dict[str, object]) -> tuple[str, tuple[str, ...]]:
    backend = EmbeddedPolicy(load_policy_sources(root / "rego", root / "policies"))
    try:
        decision = backend.decide_sync(document)
    finally:
        asyncio.run(backend.aclose())
    return decision.result.value, decision.reasons


def with_path(relative: str) -> dict[str, object]:
    return make_input(paths=[{"argument": "path", "relative": relative, "inside_workspace": True}])


def test_an_extra_module_adds_a_deny_and_an_approval_rule(tmp_path: Path) -> None:
    root = project_copy(tmp_path, {"secrets.rego": EXTENSION}, {"secrets.yaml": SECRET_DATA})
    assert decide(root, with_path("notes/a.txt"))[0] == "allow"
    result, reasons = decide(root, with_path("keys/a.pem"))
    assert result == "deny"
    assert reasons == ("argument 'path' names a secret file (rule: secret_files.suffixes)",)
    result, reasons = decide(root, with_path("prod/app.cfg"))
    assert result == "require_approval"
    assert reasons == ("tool fs.write_file writes under prod/ (rule: prod_writes)",)


@pytest.mark.parametrize("name", ["aa.rego", "toolgate_a.rego", "zz.rego"])
def test_module_order_never_changes_the_test_results(tmp_path: Path, name: str) -> None:
    """regorus 0.13 used the first module's loop plans under `with input as`: an extra module
    that sorted before toolgate.rego made every shipped test undefined."""
    root = project_copy(
        tmp_path,
        {
            name: "package toolgate\n\nfoo := 1\n",
            "a0_ext.rego": EXTENSION,
            "a0_ext_test.rego": EXTENSION_TESTS,
        },
        {"secrets.yaml": SECRET_DATA},
    )
    results = run_tests(load_policy_sources(root / "rego", root / "policies")).results
    failed = [f"{r.name}: {r.message}" for r in results if not r.passed]
    assert failed == []
    shipped = run_tests(load_policy_sources(REPO / "rego", REPO / "policies")).results
    assert len(results) == len(shipped) + 3


def toolgate(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUST_BACKTRACE": "1", "RUST_LIB_BACKTRACE": "1"}
    env.pop("TOOLGATE_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", *args],
        cwd=root,
        env=env,
        input="{}",
        capture_output=True,
        text=True,
        timeout=120,
    )


BIG_RULE = (
    "package toolgate\n\nbig := "
    + " |\n".join(f'{{m | input.a == {i}; m := "x{i}"}}' for i in range(40))
    + "\n"
)


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        (
            "package toolgate\n\ndeny_reasons contains msg if {\n\tmsg := nosuch(1)\n}\n",
            "bad.rego:4:18: Unknown function: 'nosuch'",
        ),
        (BIG_RULE, "bad.rego:3: data.toolgate.big does not compile: Register overflow"),
    ],
    ids=["unknown-function", "engine-limit"],
)
@pytest.mark.parametrize(
    "command", [("check",), ("policy", "test"), ("policy", "eval", "--input", "-")]
)
@pytest.mark.slow  # starts a process itself
def test_a_module_that_does_not_compile_gives_a_clear_message_and_no_backtrace(
    tmp_path: Path, text: str, expect: str, command: tuple[str, ...]
) -> None:
    root = project_copy(tmp_path, {"bad.rego": text})
    done = toolgate(root, *command)
    assert done.returncode == 2, done.stdout + done.stderr
    assert expect in done.stderr
    for noise in ("panicked", "backtrace", "Traceback", "stack", "RUST_"):
        assert noise not in done.stderr


@pytest.mark.slow  # starts a process itself
def test_a_misspelt_data_key_is_a_warning_with_file_and_line(tmp_path: Path) -> None:
    misspelt = EXTENSION.replace("data.toolgate.secret_files.", "data.toolgate.secret_file.")
    root = project_copy(tmp_path, {"secrets.rego": misspelt}, {"secrets.yaml": SECRET_DATA})
    sources = load_policy_sources(root / "rego", root / "policies")
    assert sources.warnings == (
        f"{root / 'rego' / 'secrets.rego'}:6: data.toolgate.secret_file.suffixes: no key "
        "'secret_file' at the top level of the policy data (policies/*.yaml) (did you mean "
        "'secret_files'?); a misspelling? the rule never sees a value there",
    )
    done = toolgate(root, "check")
    assert done.returncode == 0, done.stderr
    assert "toolgate: warning: " in done.stderr and "secrets.rego:6: " in done.stderr
    assert done.stdout.splitlines()[0].endswith(", 1 warning")


def test_a_misspelt_nested_key_is_named_where_it_goes_wrong(tmp_path: Path) -> None:
    rego = (
        'package toolgate\n\ndeny_reasons contains "x" if {\n'
        "\tdata.toolgate.approvers.by_rsk[call.risk]\n}\n"
    )
    root = project_copy(tmp_path, {"x.rego": rego})
    (warning,) = load_policy_sources(root / "rego", root / "policies").warnings
    assert warning.endswith(
        "x.rego:4: data.toolgate.approvers.by_rsk: no key 'by_rsk' at approvers of the policy "
        "data (policies/*.yaml) (did you mean 'by_risk'?); a misspelling? the rule never sees "
        "a value there"
    )


def test_the_shipped_policy_reads_only_data_that_exists() -> None:
    assert load_policy_sources(REPO / "rego", REPO / "policies").warnings == ()


def test_the_shipped_proc_python_needs_approval_under_the_shipped_policy() -> None:
    from gateway.testing import load_catalogue

    tool = load_catalogue(REPO / "tools.d").resolve("proc.python", None)
    assert "runs_agent_code" in tool.tags
    document = make_input(
        tool={
            "name": tool.name,
            "risk": tool.risk.value,
            "side_effect": tool.side_effect.value,
            "reversible": tool.reversible,
            "adapter": tool.adapter,
            "tags": list(tool.tags),
        },
        paths=[{"argument": "script", "relative": "s.py", "inside_workspace": True}],
    )
    result, reasons = decide(REPO, document)
    assert result == "require_approval"
    assert any("(rule: approval_tags.runs_agent_code)" in r for r in reasons)
