"""Fakes for the pipeline's extension points, each backed by a function (like httpx's
MockTransport). For unit tests of the pipeline's logic only; integration tests use the
real adapters and the real policy engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import anyio

from gateway import testing
from gateway.adapters.base import AdapterCall, AdapterOutcome, SideEffectReport
from gateway.declarations.catalogue import Catalogue
from gateway.observability.telemetry import OFF, Telemetry
from gateway.pipeline import normalise, resolve
from gateway.pipeline.records import Prepared, Requested, ToolExecutionRequest
from gateway.pipeline.services import Services
from gateway.policy.data import PolicyData
from gateway.runtime.container import Runtime
from gateway.settings import load_settings
from gateway.store.store import Store
from gateway.types import JSON, Decision, DecisionResult, Listing, Outcome
from gateway.workspace import Workspace
from tests.helpers import REPO


class FunctionAdapter(testing.FunctionAdapter):
    """The kit's function-backed adapter, standing in for ``adapter: file`` (the kind of the
    shipped tools the stage tests call)."""

    name: ClassVar[str] = "file"


class FunctionPolicy:
    """A policy backend backed by ``decide``, and by ``listed`` for the listing rule (None: a
    policy that defines no listing rule, so tools/list asks ``decide`` about a probe call)."""

    def __init__(
        self,
        decide: Callable[[Mapping[str, Any]], Decision],
        listed: Callable[[Mapping[str, Any]], Listing] | None = None,
    ) -> None:
        self._decide = decide
        self._listed = listed
        self.inputs: list[Mapping[str, Any]] = []
        self.listing_inputs: list[Mapping[str, Any]] = []

    async def decide(self, document: Mapping[str, Any]) -> Decision:
        self.inputs.append(document)
        return self._decide(document)

    async def listed(self, documents: Sequence[Mapping[str, Any]]) -> list[Listing] | None:
        if self._listed is None:
            return None
        self.listing_inputs.extend(documents)
        return [self._listed(d) for d in documents]

    async def aclose(self) -> None:
        return None


def allow_all(_: Mapping[str, Any]) -> Decision:
    return Decision(DecisionResult.ALLOW, ("test: allow",))


async def slow(call: AdapterCall) -> AdapterOutcome:
    """An adapter that outlasts the tests' deadlines: it is always stopped first."""
    await anyio.sleep(5)
    raise AssertionError("not reached")


def make_services(
    tmp_path: Path,
    store: Store,
    catalogue: Catalogue,
    adapter: FunctionAdapter,
    policy: FunctionPolicy,
    telemetry: Telemetry = OFF,
) -> Services:
    """A runtime of ``adapter`` and ``policy`` on ``store``, with ``telemetry`` (off unless a
    test runs the stages observed: the ``telemetry`` fixture)."""
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    settings = load_settings(REPO / "toolgate.yaml", env={}, lock_lease="2s")
    return Runtime(
        settings=settings,
        catalogue=catalogue,
        policy=policy,
        policy_data=PolicyData.parse({"actors": {"alice": {"roles": ["agent"]}}}),
        workspaces={"demo": Workspace("demo", root.resolve())},
        store=store,
        adapters={"file": adapter},
        telemetry=telemetry,
    )


def request(tool: str = "fs.write_file", **kw: object) -> ToolExecutionRequest:
    fields: dict[str, object] = dict(
        principal="alice",
        run_id="r",
        turn_id="t",
        call_id="c1",
        tool_name=tool,
        requested_version=None,
        arguments={"path": "a.txt", "content": "hi"},
        agent_id="agent",
        workspace_id="demo",
        workspace_root=None,
        deadline_ms=None,
        cancellation_token=None,
        idempotency_key=None,
        approval_token=None,
        expected_state={},
        body={},
    )
    fields.update(kw)
    return ToolExecutionRequest(**fields)  # type: ignore[arg-type]


async def ok(call: AdapterCall) -> AdapterOutcome:
    return AdapterOutcome(Outcome.SUCCEEDED, {"ok": True}, SideEffectReport(True, True, "done"))


async def read_ok(call: AdapterCall) -> AdapterOutcome:
    """A read that succeeds with the data fs.read_file declares (its ``output:``)."""
    data = {"path": "a.txt", "content": "", "encoding": "utf-8", "size": 0, "sha256": "0" * 64}
    return AdapterOutcome(Outcome.SUCCEEDED, data, SideEffectReport(False, False, "read"))


def sha_probe(value: str | None) -> object:
    async def probe(name: str, params: Mapping[str, str], call: AdapterCall) -> JSON:
        return value

    return probe


async def prepared(services: Services, req: ToolExecutionRequest) -> Prepared:
    """``req`` through the stages resolve and normalise: what the later stages start from."""
    resolved = await resolve.run(services, Requested.start(req))
    return await normalise.run(services, resolved)
