"""The adapter seam (issue 13 §1): light specs, the loader imports no adapter, each YAML file
is parsed once at start-up, capabilities are Protocols, and the public fake works."""

from __future__ import annotations

import ast
import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway import cli, yamlsrc
from gateway.adapters.base import (
    AdapterCall,
    AdapterOutcome,
    Previewing,
    Recovering,
    Templating,
)
from gateway.adapters.file.adapter import FileAdapter
from gateway.adapters.process.adapter import ProcessAdapter
from gateway.adapters.registry import KINDS, SPECS
from gateway.declarations import loader
from gateway.testing import (
    FAKE_SPEC,
    FunctionAdapter,
    load_catalogue,
    with_specs,
)
from gateway.types import Outcome
from gateway.workspace import Workspace

REPO = Path(__file__).resolve().parent.parent.parent
ADAPTERS = REPO / "gateway" / "adapters"
HEAVY = ("httpx", "httpcore", "sqlalchemy", "psutil", "playwright")


def imported_by(code: str) -> dict[str, Any]:
    """What a fresh interpreter has imported after ``code`` (and how many modules)."""
    probe = (
        "import sys, json; before = set(sys.modules); "
        + code
        + "; new = sorted(set(sys.modules) - before); "
        "print(json.dumps({'count': len(new), 'modules': new}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout
    result: dict[str, Any] = json.loads(out.splitlines()[-1])
    return result


def heavy(modules: list[str]) -> list[str]:
    return sorted({m.split(".")[0] for m in modules if m.split(".")[0] in HEAVY})


@pytest.mark.parametrize(
    "module",
    ["gateway.declarations.loader", "gateway.adapters.registry"]
    + [f"gateway.adapters.{kind}.spec" for kind in KINDS],
)
@pytest.mark.slow  # starts a process itself
def test_the_loader_and_the_specs_import_no_adapter_library(module: str) -> None:
    found = imported_by(f"import {module}")
    assert heavy(found["modules"]) == [], found["modules"]
    implementations = [m for m in found["modules"] if m.endswith(".adapter")]
    assert implementations == [], implementations


@pytest.mark.slow  # starts a process itself
def test_the_declarations_package_imports_no_adapter() -> None:
    """The specs are given to the loader: no import cycle adapters ⇄ declarations."""
    found = imported_by("import gateway.declarations.loader, gateway.declarations.catalogue")
    assert [m for m in found["modules"] if m.startswith("gateway.adapters")] == []
    for path in (REPO / "gateway" / "declarations").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = [
            node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
        ] + [a.name for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names]
        assert not [n for n in names if n.startswith("gateway.adapters")], path


def test_no_adapter_kind_imports_another() -> None:
    for kind in KINDS:
        for path in (ADAPTERS / kind).glob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module:
                    parts = node.module.split(".")
                    if parts[:2] == ["gateway", "adapters"] and len(parts) > 2:
                        assert parts[2] in (kind, "base", "shared"), (path, node.module)
    for path in (ADAPTERS / "shared").glob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert not [k for k in KINDS if f"gateway.adapters.{k}." in text], path


def test_specs_live_in_the_spec_modules() -> None:
    for kind, spec in KINDS.items():
        assert spec.name == kind
        assert SPECS[kind] is spec
        module = sys.modules[f"gateway.adapters.{kind}.spec"]
        assert module.SPEC is spec


def counting_yaml(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Count every YAML file parse: ``load_yaml`` (a file), and the declarations loader's
    ``parse_yaml`` of a text it read itself (it digests the same bytes for the revision)."""
    parses: collections.Counter[str] = collections.Counter()
    real = yamlsrc.load_yaml
    real_text = yamlsrc.parse_yaml

    def counted(path: Path) -> Any:
        parses[str(path)] += 1
        return real(path)

    def counted_text(text: str, name: str) -> Any:
        parses[name] += 1
        return real_text(text, name)

    monkeypatch.setattr(loader, "parse_yaml", counted_text)

    for module in (yamlsrc, loader, sys.modules["gateway.settings"]):
        monkeypatch.setattr(module, "load_yaml", counted)
    monkeypatch.setattr(sys.modules["gateway.policy.loader"], "load_yaml", counted)
    return parses


def test_check_parses_each_yaml_file_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: 26 parses for 22 files (the database and http adapters read tools.d again)."""
    import gateway.policy.loader  # noqa: F401  (patched below)

    monkeypatch.chdir(REPO)
    parses = counting_yaml(monkeypatch)
    assert cli.main(["--config", str(REPO / "toolgate.yaml"), "check"]) == 0
    assert "ok: 18 tool versions" in capsys.readouterr().out
    tools = [p for p in parses if "/tools.d/" in p]
    assert len(tools) == len(list((REPO / "tools.d").glob("*.yaml"))) == 18
    assert max(parses.values()) == 1, parses.most_common(3)


def test_serve_parses_each_yaml_file_once(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``toolgate serve`` loads the sources once: the check of the adapters and the app's
    start-up use what was loaded (before: 53 parses for 22 files)."""
    import anyio

    import gateway.http.server
    import gateway.observability.logs
    import gateway.policy.loader  # patched below

    def start_and_stop(open_app: Any, sock: Any, *_: Any) -> int:
        """The app opened, started and stopped on the socket serve bound, instead of served."""

        async def once() -> None:
            app = await open_app()
            async with app.router.lifespan_context(app):
                pass

        anyio.run(once)
        sock.close()
        return 0

    monkeypatch.setattr(gateway.http.server, "run", start_and_stop)
    # serve sends every logger through a handler on its stderr: here that is pytest's
    # capture, closed after this test, and later tests' log lines failed on it.
    configured: list[tuple[str, str]] = []
    monkeypatch.setattr(
        gateway.observability.logs, "configure", lambda fmt, level: configured.append((fmt, level))
    )
    monkeypatch.setenv("TOOLGATE_DATABASE_URL", f"sqlite:///{tmp_path / 'serve.db'}")
    monkeypatch.chdir(REPO)
    parses = counting_yaml(monkeypatch)
    assert cli.main(["--config", str(REPO / "toolgate.yaml"), "serve", "--port", "0"]) == 0
    capsys.readouterr()
    assert configured == [("text", "info")]
    assert len([p for p in parses if "/tools.d/" in p]) == 18
    assert max(parses.values()) == 1, parses.most_common(3)


def test_capabilities_are_protocols() -> None:
    assert isinstance(FileAdapter(), Previewing)
    assert not isinstance(FileAdapter(), Recovering)
    assert issubclass(ProcessAdapter, Recovering)
    assert not issubclass(ProcessAdapter, Previewing)
    tool = load_catalogue(REPO / "tools.d").resolve("proc.python")
    assert isinstance(tool.options, Templating)
    assert not isinstance(FunctionAdapter(_succeed), Previewing | Recovering)


async def _succeed(call: AdapterCall) -> AdapterOutcome:
    return AdapterOutcome(Outcome.SUCCEEDED, data={"echo": dict(call.arguments)})


FAKE_TOOL = """\
name: t.fake
version: 1.0.0
description: a tool of the fake adapter
adapter: fake
operation: run
side_effect: write
risk: low
input:
  n: {type: integer, required: true}
verify:
  - {probe: value, equals: "{arguments.n}"}
"""


@pytest.mark.anyio
async def test_the_fake_adapter_is_declared_and_called(tmp_path: Path) -> None:
    (tmp_path / "t.fake.yaml").write_text(FAKE_TOOL)
    with pytest.raises(Exception, match="unknown adapter 'fake'"):
        load_catalogue(tmp_path)
    tool = load_catalogue(tmp_path, with_specs(FAKE_SPEC)).resolve("t.fake")
    assert tool.adapter == FAKE_SPEC.name == FunctionAdapter.name

    async def probe(name: str, params: Any, call: AdapterCall) -> str:
        return f"{name}:{call.arguments['n']}"

    fake = FunctionAdapter(_succeed, probe)
    import anyio

    call = AdapterCall(
        execution_id="exe_1",
        tool=tool,
        arguments={"n": 3},
        workspace=Workspace("demo", tmp_path),
        paths={},
        deadline=9e9,
        cancelled=anyio.Event(),
        fencing_tokens={},
        output_budget=1000,
        context={},
    )
    out = await fake.execute(call)
    assert out.data == {"echo": {"n": 3}} and fake.calls == [call]
    assert await fake.probe("value", {}, call) == "value:3"
    await fake.aclose()
    assert fake.closed
