"""The public test kit: a fake adapter backed by functions, and real gateways on a temporary
project (docs/adapters/writing.md shows both in use).

- ``FunctionAdapter`` is this project's ``httpx.MockTransport``: an adapter whose
  ``execute`` (and ``probe``) are functions you give it, recording every call. Declare its
  tools with ``adapter: fake`` (``FAKE_SPEC``) and load them with
  ``load_catalogue(tools_dir, with_specs(FAKE_SPEC))``. For unit tests of the pipeline and of
  the code around an adapter; test an adapter itself against the real system it drives.
- ``load_catalogue`` and ``load_declaration`` are the loader's, checking against the shipped
  adapters' specs unless given others.
- ``adapter_call`` builds the ``AdapterCall`` the pipeline would hand an adapter, for a test
  (or a benchmark) that calls ``execute`` itself.
- ``make_project`` copies the shipped project (tools.d, rego, policies, examples,
  toolgate.yaml) under a temporary directory; ``gateway`` starts ``toolgate serve`` on it
  and yields its base URL; ``free_port``, ``serve``, ``wait_healthy`` and ``stop`` are the pieces.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, ClassVar

import anyio
import httpx
import yaml

from gateway.adapters.base import AdapterCall, AdapterOutcome
from gateway.adapters.registry import SPECS
from gateway.declarations import loader
from gateway.declarations.catalogue import Catalogue
from gateway.declarations.model import ToolDeclaration
from gateway.declarations.spec import AdapterSpec
from gateway.http.server import EXIT_CANNOT_LISTEN
from gateway.settings import Settings
from gateway.types import JSON
from gateway.workspace import Workspace
from gateway.yamlsrc import Lines

__all__ = [
    "FAKE_SPEC",
    "PROJECT",
    "SAMPLE_POLICY_INPUT",
    "FunctionAdapter",
    "adapter_call",
    "catalogue_of",
    "free_port",
    "gateway",
    "load_catalogue",
    "load_declaration",
    "make_project",
    "run_agent_code_without_approval",
    "serve",
    "stop",
    "wait_healthy",
    "with_specs",
]

PROJECT = Path(__file__).resolve().parent.parent
"""The project this package ships with (its tools.d, rego/, policies/, toolgate.yaml)."""

SAMPLE_POLICY_INPUT: dict[str, Any] = {
    "tool": {
        "name": "fs.write_file",
        "version": "1.2.0",
        "risk": "medium",
        "side_effect": "write",
        "reversible": False,
        "adapter": "file",
        "tags": ["fs"],
    },
    "arguments": {"path": "notes/a.txt", "content": "hi"},
    "arguments_sha256": "9b1e1b2a",
    "paths": [{"argument": "path", "relative": "notes/a.txt", "inside_workspace": True}],
    "action": {"kind": "file"},
    "actor": {
        "user_id": "alice",
        "agent_id": "coder",
        "roles": ["agent"],
        "credential": {"method": "api_key", "roles": []},
    },
    "workspace": {"id": "demo", "root": "/srv/toolgate/var/workspaces/demo"},
    "request": {
        "run_id": "r1",
        "turn_id": "t1",
        "call_id": "c1",
        "deadline_ms_left": 9000,
        "idempotency_key_present": True,
        "time_ms": 1764579600000,
    },
    "approval": {"present": False, "approved_by": None},
    "usage": {},
}
"""A policy input as the pipeline builds it: an agent's allowed write (copy before changing)."""

_ANY_EFFECT = frozenset({"none", "read", "write", "external"})
FAKE_SPEC = AdapterSpec(
    name="fake",
    operations={"run": _ANY_EFFECT, "read": frozenset({"none", "read"})},
    probes={"value": frozenset()},
)
"""What a tool of ``adapter: fake`` may declare: operation ``run`` (any side effect) or
``read``, and the probe ``value`` (no parameters required)."""

Execute = Callable[[AdapterCall], Awaitable[AdapterOutcome]]
Probe = Callable[[str, Mapping[str, str], AdapterCall], Awaitable[JSON]]


class FunctionAdapter:
    """An adapter whose ``execute`` and ``probe`` are the given functions; ``calls`` lists
    every call ``execute`` got, in order. ``probe`` answers None when none is given."""

    name: ClassVar[str] = FAKE_SPEC.name

    def __init__(self, execute: Execute, probe: Probe | None = None) -> None:
        self._execute, self._probe = execute, probe
        self.calls: list[AdapterCall] = []
        self.closed = False

    async def execute(self, call: AdapterCall) -> AdapterOutcome:
        self.calls.append(call)
        return await self._execute(call)

    async def probe(self, name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        if self._probe is None:
            return None
        return await self._probe(name, params, call)

    async def aclose(self) -> None:
        self.closed = True


def with_specs(*extra: AdapterSpec) -> dict[str, AdapterSpec]:
    """The shipped adapters' specs plus ``extra`` (e.g. ``FAKE_SPEC``), for the loader."""
    return {**SPECS, **{spec.name: spec for spec in extra}}


def load_catalogue(tools_dir: Path, specs: Mapping[str, AdapterSpec] = SPECS) -> Catalogue:
    """``gateway.declarations.loader.load_catalogue``, the shipped specs by default."""
    return loader.load_catalogue(tools_dir, specs)


def catalogue_of(settings: Settings, specs: Mapping[str, AdapterSpec] = SPECS) -> Catalogue:
    """The tools of ``settings.tools_dir`` that load (none when it does not exist): what
    an adapter's ``create(settings, config, catalogue)`` gets, for a test that builds one."""
    tools_dir = settings.path(settings.tools_dir)
    return loader.read_catalogue(tools_dir, specs)[0] if tools_dir.is_dir() else Catalogue(())


def load_declaration(
    path: Path, specs: Mapping[str, AdapterSpec] = SPECS
) -> tuple[ToolDeclaration, Lines]:
    """``gateway.declarations.loader.load_declaration``, the shipped specs by default."""
    return loader.load_declaration(path, specs)


def adapter_call(
    tool: ToolDeclaration,
    arguments: Mapping[str, JSON] | None = None,
    *,
    workspace: Workspace | None = None,
    key: str = "",
    seconds: float = 10.0,
    budget: int | None = None,
    traceparent: str | None = None,
    cancelled: anyio.Event | None = None,
) -> AdapterCall:
    """The ``AdapterCall`` of one call of ``tool`` with ``arguments`` (taken as they are: no
    defaults filled in), as alice through agent ``coder``, in ``workspace`` (by default
    ``demo`` at a directory that does not exist, for adapters that touch no files), with
    ``seconds`` left, idempotency key ``key`` and ``tool``'s output budget unless ``budget``."""
    arguments = dict(arguments or {})
    workspace = workspace or Workspace("demo", Path("/nonexistent"))
    return AdapterCall(
        execution_id="ex_test",
        tool=tool,
        arguments=arguments,
        workspace=workspace,
        paths={},
        deadline=time.time() + seconds,
        cancelled=cancelled or anyio.Event(),
        fencing_tokens={},
        output_budget=budget or tool.output_budget,
        context={
            "arguments": arguments,
            "workspace": workspace.to_json(),
            "actor": {"user_id": "alice", "agent_id": "coder"},
            "request": {"run_id": "r1", "turn_id": "t1", "call_id": "c1", "idempotency_key": key},
            "tool": {"name": tool.name, "version": str(tool.version)},
            "execution": {"id": "ex_test"},
        },
        traceparent=traceparent,
    )


# --- real gateways on a temporary project -------------------------------------------------


def free_port() -> int:
    """A loopback TCP port free right now (a guess: another process may take it first)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_project(
    root: Path, database_url: str, quotas: bool = False, source: Path = PROJECT
) -> Path:
    """A copy of the shipped project under ``root``; quotas lifted unless ``quotas``.
    Returns the path of its toolgate.yaml."""
    for name in ("tools.d", "rego", "policies", "examples"):
        if (source / name).is_dir():
            shutil.copytree(
                source / name,
                root / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
    config = yaml.safe_load((source / "toolgate.yaml").read_text())
    config["database_url"] = database_url
    config["approval_secret"] = "s" * 40
    (root / "toolgate.yaml").write_text(yaml.safe_dump(config))
    if not quotas:
        rules = root / "policies" / "rules.yaml"
        data = yaml.safe_load(rules.read_text())
        data["quotas"] = {"calls_per_minute": {}}
        rules.write_text(yaml.safe_dump(data))
    return root / "toolgate.yaml"


def run_agent_code_without_approval(
    root: Path, tools: tuple[str, ...] = ("proc.python", "proc.run_tests")
) -> None:
    """Lift the shipped policy's approval for the tools that run agent code (approval_tags),
    for tests of what the process adapter does rather than of the policy."""
    rules = root / "policies" / "rules.yaml"
    data = yaml.safe_load(rules.read_text())
    for tool in tools:
        data.setdefault("tool_overrides", {})[tool] = {"approval": False}
    rules.write_text(yaml.safe_dump(data))


@contextmanager
def gateway(
    config: Path,
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
    probe: str = "/readyz",
) -> Iterator[str]:
    """Start ``toolgate serve`` and yield its base URL once ``probe`` answers 200 (``/healthz``
    for a gateway that cannot be ready yet: its OPA is started after it, say); stop it
    afterwards.

    A start that loses its port to another process (free_port is only a guess) is retried
    on a new port."""
    for attempt in range(3):
        port = free_port()
        log_path = config.parent / f"gateway-{port}.log"
        with log_path.open("wb") as log:
            proc = serve(config, port, log, env, args)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_healthy(url, proc, probe=probe)
            break
        except RuntimeError:
            stop(proc)
            if attempt == 2 or proc.returncode != EXIT_CANNOT_LISTEN:
                raise
    try:
        yield url
    finally:
        stop(proc)


def serve(
    config: Path,
    port: int,
    log: IO[bytes],
    env: dict[str, str] | None = None,
    args: Sequence[str] = (),
) -> subprocess.Popen[bytes]:
    """Start ``toolgate serve`` on ``port`` (not waiting for it), its output to ``log``;
    ``args``: more options of ``serve`` (``--workers 2``)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gateway.cli",
            "--config",
            str(config),
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *args,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=config.parent,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_healthy(
    url: str, proc: subprocess.Popen[bytes], timeout: float = 60, probe: str = "/readyz"
) -> None:
    """Wait until ``url``'s ``probe`` (``/readyz``, or ``/healthz``) answers 200;
    RuntimeError if the process exits or ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the gateway exited with {proc.returncode}")
        try:
            if httpx.get(url + probe, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the gateway did not become ready")
