"""The typed policy data (gateway.policy.data): every shape the shipped data and the tests
use loads, and a wrong shape of a key the gateway reads is refused at load with its file,
line and key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.errors import ConfigError
from gateway.policy.data import PolicyData
from gateway.policy.loader import load_policy_sources
from gateway.runtime.bootstrap import load_sources
from gateway.settings import load_settings
from tests.helpers import REPO


def parsed(root: Path) -> PolicyData:
    sources = load_policy_sources(root / "rego", root / "policies")
    return PolicyData.parse(sources.data, sources.lines)


def test_the_shipped_data_as_the_gateway_reads_it() -> None:
    data = parsed(REPO)
    assert data.roles("carol") == ("agent", "approver") and data.roles("mallory") == ()
    assert data.approvers.roles_for("high") == ("approver",)
    assert data.approvers.roles_for("critical") == ("admin",)
    assert data.approvers.named == {"approver", "admin"}
    assert data.approvers.allow_self_approval is False
    assert data.may_list_approvals("bob") and not data.may_list_approvals("alice")
    assert data.roles("bob") == ("approver",)
    assert data.workspaces["ops"].root == "var/workspaces/ops"
    assert data.workspaces["ops"].members == ("bob",)
    assert data.quota("high") == 10


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"approvers": None, "quotas": None, "actors": None, "workspaces": None},
        {"approvers": {}, "quotas": {}, "actors": {"a": None, "b": {}, "c": {"roles": None}}},
        {"quotas": {"calls_per_minute": {}}},
        {"quotas": {"calls_per_minute": {"low": None, "high": 0}}},
        {"approvers": {"by_risk": {"high": []}, "allow_self_approval": None}},
        {"actors": {"a": {"roles": ["x"], "team": "ops"}}, "protected_paths": [".git/"]},
        {"workspaces": {"w": {"root": "/abs", "members": None, "note": "extra keys are Rego's"}}},
    ],
)
def test_every_shape_in_use_loads(raw: dict[str, object]) -> None:
    data = PolicyData.parse(raw)
    assert data.roles("nobody") == ()
    assert not data.may_list_approvals("a")
    assert set(data.approvers.roles_for("high")).isdisjoint(data.roles("a"))


def test_no_approver_roles_means_nobody_lists_or_decides() -> None:
    data = PolicyData.parse({"actors": {"bob": {"roles": ["approver"]}}, "approvers": {}})
    assert data.approvers.roles_for("high") == () and data.approvers.named == frozenset()
    assert not data.may_list_approvals("bob")


def test_a_wrong_shape_names_the_file_line_and_key(tmp_path: Path) -> None:
    for name in ("rego", "policies"):
        shutil.copytree(REPO / name, tmp_path / name)
    rules = tmp_path / "policies" / "rules.yaml"
    text = rules.read_text()
    for old, new in (
        ("  default: [approver]", "  default: approver"),
        ("  allow_self_approval: false", "  allow_self_aproval: false"),
        ("    high: 10", "    hgh: 10"),
        ("    critical: 2", "    critical: two"),
    ):
        assert old in text
        text = text.replace(old, new)
    rules.write_text(text)
    spaces = tmp_path / "policies" / "workspaces.yaml"
    spaces.write_text(spaces.read_text().replace("    root: var/workspaces/demo\n", ""))
    with pytest.raises(ConfigError) as info:
        parsed(tmp_path)
    assert info.value.problems == [
        f"{rules}:47: approvers.allow_self_aproval: unknown key "
        "(known: default, by_risk, allow_self_approval)",
        f"{rules}:44: approvers.default: must be a list of strings (got 'approver')",
        f"{spaces}:8: workspaces.demo: workspace 'demo' has no 'root' (a directory)",
        f"{rules}:57: quotas.calls_per_minute.hgh: no such tool risk "
        "(one of low, medium, high, critical)",
        f"{rules}:58: quotas.calls_per_minute.critical: must be a whole number, 0 or more "
        "(got 'two')",
    ]


def test_toolgate_check_lists_policy_data_faults_with_the_others(tmp_path: Path) -> None:
    for name in ("tools.d", "rego", "policies", "examples"):
        shutil.copytree(REPO / name, tmp_path / name)
    shutil.copy(REPO / "toolgate.yaml", tmp_path / "toolgate.yaml")
    (tmp_path / "policies" / "actors.yaml").write_text("actors:\n  alice:\n    roles: agent\n")
    settings = load_settings(tmp_path / "toolgate.yaml", env={})
    with pytest.raises(ConfigError) as info:
        load_sources(settings)
    assert info.value.problems == [
        f"{tmp_path / 'policies' / 'actors.yaml'}:3: actors.alice.roles: must be a list of "
        "strings (got 'agent')"
    ]


def test_protected_paths_are_read_and_checked() -> None:
    """The one list of protected paths: the Rego reads it, and so does the gateway (every
    workspace carries it; a process tool's view makes them read-only)."""
    assert parsed(REPO).protected_paths == (".git/", ".toolgate/")
    for bad in ("/etc", "../up", "a/./b", "x\x00"):
        with pytest.raises(ConfigError, match=r"protected_paths\.0: must be a workspace-relative"):
            PolicyData.parse({"protected_paths": [bad]})
    with pytest.raises(ConfigError, match="must be a list of strings"):
        PolicyData.parse({"protected_paths": ".git/"})
