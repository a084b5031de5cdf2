"""Property tests (hypothesis) of the three places that turn a caller's text into something
the gateway acts on: path confinement, template interpolation, argument normalisation.

Derandomized with a fixed number of examples (``PROFILE``), so a failure reproduces."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.adapters.process.plan import make_plan
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.templates import TemplateError, compile_template
from gateway.errors import ValidationError
from gateway.pipeline.normalise import _normalise
from gateway.pipeline.records import sha256_json
from gateway.testing import PROJECT, adapter_call, load_catalogue, load_declaration
from gateway.workspace import Workspace, confine
from tests.helpers import FUZZ_SCALE

PROFILE = settings(
    max_examples=150 * FUZZ_SCALE,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "a",
        "b",
        "link",
        "up",
        "loop",
        "deep",
        "é",
        "日本",
        "\u202e",
        "\\",
        "..\\",
        "\x00",
        "~",
        "%2e%2e",
        "C:",
        "a b",
        "\ufeff",
        ".\u2024",
        "\u2025",
        "\u2026",
        "\uff0e\uff0e",
    ]
) | st.text(max_size=6)
PATHS = st.lists(SEGMENTS, max_size=8).map("/".join) | st.text(max_size=30)
LINK_TARGETS = st.sampled_from(
    [
        "/",
        "..",
        "../..",
        "../outside",
        "{outside}",
        "{outside}/secret",
        "a",
        "a/b",
        "link",
        "loop",
        ".",
        "missing/x",
        "{root}",
        "{root}/a",
        "{root}/../outside",
        "/etc/passwd",
    ]
)
REFUSED_CODES = {"path_escape", "invalid_path"}


def _inside(root: Path, resolved: Path) -> bool:
    real = os.path.realpath(resolved)
    return real == str(root) or real.startswith(str(root) + os.sep)


@PROFILE
@given(
    links=st.dictionaries(st.sampled_from(["link", "up", "loop", "a/deep", "a/b/c"]), LINK_TARGETS),
    raw=PATHS,
)
def test_confine_never_yields_a_path_outside_the_root(links: dict[str, str], raw: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp).resolve()
        root, outside = base / "root", base / "outside"
        (root / "a" / "b").mkdir(parents=True)
        outside.mkdir()
        (outside / "secret").write_text("s")
        for name, target in links.items():  # symlinks made on the fly, per example
            link = root / name
            if not link.parent.is_dir() or link.exists() or link.is_symlink():
                continue
            link.symlink_to(target.format(outside=outside, root=root))
        workspace = Workspace.declare("w", root)
        try:
            resolved = confine(workspace, raw)
        except ValidationError as exc:
            assert exc.code in REFUSED_CODES, exc.code
            return
        assert not resolved.relative.startswith("/")
        assert ".." not in resolved.relative.split("/")
        assert _inside(root, resolved.absolute), (raw, links, resolved.relative)
        # what the adapter would open, spelled as the caller sent it, is inside too
        assert _inside(root, root / raw.replace("\\", "/").lstrip("/")), (raw, links)
        # confining the confined form is a fixed point
        assert confine(workspace, resolved.relative).relative == resolved.relative


@PROFILE
@given(raw=st.text(max_size=20).map(lambda s: s + "\x00") | st.binary(max_size=5))
def test_confine_refuses_nul_bytes_and_non_strings(raw: object, tmp_path: Path) -> None:
    workspace = Workspace.declare("w", tmp_path)
    with pytest.raises(ValidationError) as caught:
        confine(workspace, raw)
    assert caught.value.code == "invalid_path"


HOLE_VALUES = st.text() | st.sampled_from(
    [
        "{arguments.b}",
        "{{arguments.b}}",
        "}{",
        "{",
        "}",
        "{workspace.root}",
        "a b",
        "-rf /",
        "$(id)",
        "`id`",
        "--",
        "x\ny",
        "\x00",
        "'\"",
        "{sha256(arguments.b)}",
    ]
)


@PROFILE
@given(a=HOLE_VALUES, b=HOLE_VALUES)
def test_an_interpolated_value_never_reaches_another_hole(a: str, b: str) -> None:
    template = compile_template("A[{arguments.a}]B[{arguments.b}]W[{workspace.id}]")
    context = {"arguments": {"a": a, "b": b}, "workspace": {"id": "w", "root": "/r"}}
    assert template.render(context) == f"A[{a}]B[{b}]W[w]"  # verbatim: one pass, no re-read
    assert compile_template("{lower(arguments.a)}").render(context) == a.lower()


@PROFILE
@given(source=st.text(alphabet="{}ab.()_ *", max_size=24) | st.text(max_size=24))
def test_a_template_compiles_or_names_its_fault(source: str) -> None:
    try:
        template = compile_template(source)
    except TemplateError:
        return
    for ref in template.references:
        assert ref[0] in {"arguments", "workspace", "actor", "request", "tool", "execution"}


@pytest.fixture(scope="module")
def python_tool() -> Any:
    return load_declaration(PROJECT / "tools.d" / "proc.python.yaml")[0]


ARGV_TEXT = HOLE_VALUES | st.text(alphabet=" \t\n'\"\\;|&$`*?-", max_size=10)


@PROFILE
@given(script=ARGV_TEXT, args=st.lists(ARGV_TEXT, max_size=5))
def test_no_input_crosses_an_argv_boundary(
    python_tool: Any, tmp_path: Path, script: str, args: list[str]
) -> None:
    workspace = Workspace.declare("w", tmp_path)
    call = adapter_call(
        python_tool, {"script": script, "args": args, "stdin": ""}, workspace=workspace
    )
    try:
        plan = make_plan(call, {"python": sys.executable})
    except ValidationError as exc:
        assert "\x00" in script + "".join(args), exc
        return
    assert plan.argv == (sys.executable, "-u", "--", script, *args)


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue(PROJECT / "tools.d")


SPELLINGS = st.lists(st.sampled_from(["", "."]), max_size=2).map(lambda xs: "/".join(xs))


@PROFILE
@given(
    names=st.lists(st.sampled_from(["a", "b", "notes", "é", "x.txt"]), min_size=1, max_size=4),
    noise=st.lists(SPELLINGS, min_size=5, max_size=5),
    content=st.text(max_size=20),
)
def test_two_spellings_of_one_call_normalise_to_one_hash(
    catalogue: Catalogue, tmp_path: Path, names: list[str], noise: list[str], content: str
) -> None:
    tool = catalogue.resolve("fs.write_file", None)
    workspace = Workspace.declare("w", tmp_path)
    plain = "/".join(names)
    noisy = "./" + "/".join(f"{n}/{noise[i % 5]}" for i, n in enumerate(names)).rstrip("/")
    validator = catalogue.validator(tool)
    first, _ = _normalise(tool, workspace, validator, {"path": plain, "content": content})
    second, _ = _normalise(tool, workspace, validator, {"path": noisy, "content": content})
    assert first == second and sha256_json(first) == sha256_json(second)
    again, _ = _normalise(tool, workspace, validator, dict(first))
    assert again == first  # normalisation is idempotent


@PROFILE
@given(arguments=st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers()))
def test_normalisation_refuses_or_returns_what_the_schema_allows(
    catalogue: Catalogue, tmp_path: Path, arguments: dict[str, Any]
) -> None:
    tool = catalogue.resolve("fs.write_file", None)
    validator = catalogue.validator(tool)
    workspace = Workspace.declare("w", tmp_path)
    try:
        normalised, paths = _normalise(tool, workspace, validator, dict(arguments))
    except ValidationError as exc:
        assert exc.code in {"invalid_arguments"} | REFUSED_CODES
        return
    assert set(normalised) <= set(tool.input), normalised
    assert _inside(tmp_path, paths["path"].absolute)
