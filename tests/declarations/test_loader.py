"""tools.d loading: the shipped catalogue loads; every fault names file, line and key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gateway.errors import ConfigError, ResolveError
from gateway.testing import load_catalogue
from tests.helpers import REPO

GOOD = """\
name: t.echo
version: 1.0.0
description: Read a file.
adapter: file
operation: read
risk: low
side_effect: read
input:
  path: {type: string, required: true}
paths: [path]
"""


def _load_one(tmp_path: Path, text: str, name: str = "tool.yaml") -> list[str]:
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    return info.value.problems


def test_shipped_catalogue_loads() -> None:
    catalogue = load_catalogue(REPO / "tools.d")
    names = set(catalogue.names)
    assert {
        "fs.read_file",
        "fs.list_dir",
        "fs.write_file",
        "fs.apply_patch",
        "fs.delete_file",
    } <= names
    assert str(catalogue.resolve("fs.write_file").version) == "1.2.0"
    assert str(catalogue.resolve("fs.write_file", "1.0.0").version) == "1.0.0"
    assert str(catalogue.resolve("fs.write_file", "<1.2").version) == "1.0.0"


def test_good_file_loads(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(GOOD)
    assert load_catalogue(tmp_path).resolve("t.echo").operation == "read"


def test_yaml_error_names_file_and_line(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD + "locks: [\n  {key: 'a'\n")
    assert len(problems) == 1
    assert "tool.yaml:" in problems[0]
    assert "YAML error" in problems[0]


def test_unknown_key_names_line_and_key(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD + "colour: blue\n")
    [problem] = problems  # no key is near: what the file may say instead
    assert problem.startswith(f"{tmp_path / 'tool.yaml'}:11: colour: unknown key (known: ")
    assert "risk, side_effect" in problem


def test_a_misspelt_key_or_value_names_the_closest_known_one(tmp_path: Path) -> None:
    """Issue 29.4: pydantic's and cerberus's words said what was wrong, not what was meant."""
    problems = _load_one(tmp_path, GOOD.replace("risk: low", "risk: lwo") + "idempotnecy: none\n")
    where = f"{tmp_path / 'tool.yaml'}"
    assert problems == [
        f"{where}:6: risk: Input should be 'low', 'medium', 'high' or 'critical' "
        "(got 'lwo'; did you mean 'low'?)",
        f"{where}:11: idempotnecy: unknown key (did you mean 'idempotency'?)",
    ], problems
    problems = _load_one(tmp_path, GOOD + "output:\n  size: {type: int, maxlenght: 3}\n")
    assert problems == [
        f"{where}:11: output: size.maxlenght: unknown rule 'maxlenght' (did you mean 'maxlength'?)",
        f"{where}:11: output: size.type: unknown type 'int' (did you mean 'integer'?)",
    ], problems


def test_wrong_type(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD.replace("risk: low", "risk: [low]"))
    assert any(":6: risk:" in p for p in problems), problems


def test_a_list_is_called_a_list(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD.replace("paths: [path]", "paths: path"))
    assert any(":10: paths: Input should be a valid list" in p for p in problems), problems
    assert not any("tuple" in p.lower() for p in problems), problems


def test_duplicate_key_in_one_file(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD + "risk: high\n")
    assert "duplicate key 'risk'" in problems[0]


def test_duplicate_name_and_version_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    problems = _load_one(tmp_path, GOOD, "b.yaml")
    assert len(problems) == 1
    assert "t.echo@1.0.0 is declared twice" in problems[0]
    assert "b.yaml:2: version" in problems[0]


def test_unknown_adapter_and_operation(tmp_path: Path) -> None:
    assert (
        "unknown adapter 'ftp'"
        in _load_one(tmp_path, GOOD.replace("adapter: file", "adapter: ftp"))[0]
    )
    problems = _load_one(tmp_path, GOOD.replace("operation: read", "operation: shred"))
    assert "has no operation 'shred'" in problems[0]
    assert ":5: operation" in problems[0]


def test_side_effect_must_fit_the_operation(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD.replace("side_effect: read", "side_effect: write"))
    assert "side_effect" in problems[0]


def test_templates_are_checked_at_load(tmp_path: Path) -> None:
    bad = GOOD + "locks:\n  - {key: 'f:{arguments.pth}'}\n"
    problems = _load_one(tmp_path, bad)
    assert "arguments.pth" in problems[0]
    assert ":12: locks.0.key" in problems[0]
    problems = _load_one(tmp_path, GOOD + "locks:\n  - {key: 'f:{os.system}'}\n")
    assert "must start with one of" in problems[0]


def test_probe_names_and_params_are_checked(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD + "verify:\n  - {probe: magic}\n")
    assert "no probe 'magic'" in problems[0]
    problems = _load_one(tmp_path, GOOD + "verify:\n  - {probe: file_sha256}\n")
    assert "needs the parameter 'path'" in problems[0]


def test_invalid_cerberus_schema(tmp_path: Path) -> None:
    problems = _load_one(
        tmp_path, GOOD.replace("required: true}", "required: true, frobnicate: 1}")
    )
    assert "input" in problems[0]


def test_path_argument_must_be_declared(tmp_path: Path) -> None:
    problems = _load_one(tmp_path, GOOD.replace("paths: [path]", "paths: [path, dest]"))
    assert "'dest' is not in input" in problems[0]
    problems = _load_one(tmp_path, GOOD.replace("paths: [path]", "paths: []"))
    assert "needs 'path' listed in paths" in problems[0]


def test_all_faults_of_all_files_are_listed(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD + "colour: 1\n")
    (tmp_path / "b.yaml").write_text("name: [\n")
    (tmp_path / "c.yaml").write_text(GOOD.replace("t.echo", "t.other"))
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path)
    text = "\n".join(info.value.problems)
    assert "a.yaml" in text and "b.yaml" in text and "c.yaml" not in text


def test_a_broken_copy_of_the_shipped_tools_fails(tmp_path: Path) -> None:
    shutil.copytree(REPO / "tools.d", tmp_path / "tools.d")
    path = tmp_path / "tools.d" / "fs.read_file.yaml"
    path.write_text(path.read_text().replace("risk: low", "risk: extreme"))
    with pytest.raises(ConfigError) as info:
        load_catalogue(tmp_path / "tools.d")
    assert "fs.read_file.yaml:6: risk" in info.value.problems[0]


def test_disabled_and_unknown_versions(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD.replace("1.0.0", "1.1.0") + "disabled: true\n")
    catalogue = load_catalogue(tmp_path)
    assert str(catalogue.resolve("t.echo").version) == "1.0.0"
    with pytest.raises(ResolveError) as info:
        catalogue.resolve("t.echo", "1.1.0")
    assert info.value.code == "tool_disabled"
    with pytest.raises(ResolveError) as info:
        catalogue.resolve("t.echo", "not a range!")
    assert info.value.code == "invalid_version_range"


def test_editable_arguments_must_be_in_input(tmp_path: Path) -> None:
    bad = GOOD + "approval:\n  editable: [path, pth, path]\n"
    problems = _load_one(tmp_path, bad)
    assert len(problems) == 2, problems
    assert ":12: approval.editable.1: editable argument 'pth' is not in input" in problems[0]
    assert "(arguments: path)" in problems[0]
    assert ":12: approval.editable.2: editable argument 'path' is listed twice" in problems[1]
    unknown = _load_one(tmp_path, GOOD + "approval: {editable: [path], edit: true}\n")
    assert ":11: approval.edit: unknown key" in unknown[0], unknown
    (tmp_path / "tool.yaml").write_text(GOOD + "approval: {editable: [path]}\n")
    (tool,) = load_catalogue(tmp_path).versions("t.echo")
    assert tool.approval.editable == ("path",)


def test_an_output_schema_is_checked_at_load_with_file_line_and_key(tmp_path: Path) -> None:
    bad = GOOD + "output:\n  size: {type: integr}\n  sha256: {type: string, regexx: '.'}\n"
    problems = _load_one(tmp_path, bad)
    where = f"{tmp_path / 'tool.yaml'}:11: output"
    assert f"{where}: size.type: unknown type 'integr' (did you mean 'integer'?)" in problems
    assert f"{where}: sha256.regexx: unknown rule 'regexx' (did you mean 'regex'?)" in problems
    not_a_mapping = _load_one(tmp_path, GOOD + "output: [path]\n")
    assert any(":11: output: Input should be a valid dictionary" in p for p in not_a_mapping)


def test_an_output_schema_may_not_change_the_data(tmp_path: Path) -> None:
    bad = GOOD + (
        "output:\n"
        "  path: {type: string, required: true}\n"
        "  size: {type: integer, default: 0}\n"
        "  meta:\n"
        "    type: dict\n"
        "    schema: {etag: {type: string, rename: tag}}\n"
    )
    problems = _load_one(tmp_path, bad)
    assert problems == [
        f"{tmp_path / 'tool.yaml'}:13: output.size: 'default' (at size) changes the data "
        "instead of checking it; an output schema only checks",
        f"{tmp_path / 'tool.yaml'}:14: output.meta: 'rename' (at meta.etag) changes the data "
        "instead of checking it; an output schema only checks",
    ], problems


def test_a_declared_output_loads_and_is_published(tmp_path: Path) -> None:
    from gateway.declarations.definitions import output_schema, tool_definition

    text = GOOD + "output:\n  path: {type: string, required: true, meta: the file}\n"
    (tmp_path / "t.yaml").write_text(text)
    tool = load_catalogue(tmp_path).resolve("t.echo")
    expected = {
        "type": "object",
        "properties": {"path": {"description": "the file", "type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    }
    assert output_schema(tool) == expected
    assert tool_definition(tool, "mcp")["outputSchema"] == expected
    (tmp_path / "t.yaml").write_text(GOOD)
    plain = load_catalogue(tmp_path).resolve("t.echo")
    assert output_schema(plain) is None and "outputSchema" not in tool_definition(plain, "mcp")
