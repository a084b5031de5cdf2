from __future__ import annotations

import pytest

from gateway.declarations.semver import Version, parse_range
from gateway.declarations.templates import TemplateError, compile_template

VERSIONS = [Version.parse(v) for v in ["0.9.0", "1.0.0", "1.2.0", "1.2.5", "2.0.0-rc.1", "2.0.0"]]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("1.2.0", ["1.2.0"]),
        ("^1", ["1.0.0", "1.2.0", "1.2.5"]),
        ("^1.2", ["1.2.0", "1.2.5"]),
        ("~1.2.0", ["1.2.0", "1.2.5"]),
        ("1.x", ["1.0.0", "1.2.0", "1.2.5"]),
        (">=1.0.0 <1.2.5", ["1.0.0", "1.2.0"]),
        ("^0.9 || ^2", ["0.9.0", "2.0.0"]),
        ("*", ["0.9.0", "1.0.0", "1.2.0", "1.2.5", "2.0.0"]),
        ("2.0.0-rc.1", ["2.0.0-rc.1"]),
    ],
)
def test_ranges(spec: str, expected: list[str]) -> None:
    matches = parse_range(spec)
    assert [str(v) for v in VERSIONS if matches(v)] == expected


def test_ordering() -> None:
    assert Version.parse("2.0.0-rc.1") < Version.parse("2.0.0")
    assert sorted(VERSIONS)[-1] == Version.parse("2.0.0")


@pytest.mark.parametrize("bad", ["1.2.3.4", "abc", "^x.y", ">=banana"])
def test_bad_ranges(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_range(bad)


def test_template_render() -> None:
    t = compile_template("ws:{workspace.id}:file:{arguments.path} {{x}}")
    ctx = {"workspace": {"id": "demo"}, "arguments": {"path": "a.txt"}}
    assert t.render(ctx) == "ws:demo:file:a.txt {x}"
    digest = compile_template("{sha256(arguments.content)}").render(
        {"arguments": {"content": "hi"}}
    )
    assert digest == "8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4"


@pytest.mark.parametrize(
    "source",
    ["{", "}", "{arguments.path", "{__import__('os')}", "{evil(arguments.x)}", "{env.HOME}"],
)
def test_bad_templates(source: str) -> None:
    with pytest.raises(TemplateError):
        compile_template(source)


def test_missing_value_at_render() -> None:
    with pytest.raises(TemplateError, match=r"arguments\.nope"):
        compile_template("{arguments.nope}").render({"arguments": {}})
