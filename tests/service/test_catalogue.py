"""What every door lists: the policy's own listing rule (data.toolgate.listed) on both policy
backends, fail closed, and the probe call for a policy that does not define the rule.

In process: ``catalogue.visible`` over a runtime of the shipped catalogue and a temporary
project's policy (the store is never touched by a listing). The SDK tests (tests/mcp/test_sdk.py)
list through a real gateway; tests/service/test_door_parity.py through every door."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
import yaml

from gateway.policy.data import PolicyData
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources, load_policy_sources
from gateway.policy.opa import OpaPolicy
from gateway.policy.standin import StandIn
from gateway.runtime.container import Runtime
from gateway.server.app import create_app
from gateway.service import catalogue
from gateway.settings import load_settings
from gateway.store.store import Store
from gateway.testing import load_catalogue, make_project
from gateway.types import DecisionResult, PolicyBackend
from gateway.workspace import Workspace
from tests.helpers import ALICE, BOB, REPO, until
from tests.policy.opa_helpers import Hanging, standin

BACKENDS = ("embedded", "opa")

# A check that reads the call's arguments: it denies only a call without a path, which no real
# call of fs.read_file is (its `path` is required). The old probe call (arguments {}) hid it.
NEEDS_PATH = """\
package toolgate

deny_reasons contains msg if {
	input.tool.name == "fs.read_file"
	not input.arguments.path
	msg := "fs.read_file reads a path (rule: needs_path)"
}
"""

# A standing refusal whose evaluation fails for one tool (to_number of a tool name).
BROKEN = """\
package toolgate

standing_refusals contains msg if {
	input.tool.name in {"fs.read_file", "fs.write_file"}
	to_number(input.tool.name) > 0
	msg := "not reached"
}
"""

# A policy written before the listing rule: a decision, no `listed`.
NO_LISTING_RULE = """\
package toolgate

decision := {"result": "allow", "reasons": ["read"]} if {
	input.tool.name == "fs.read_file"
} else := {"result": "deny", "reasons": ["not fs.read_file"]}
"""


def project(tmp_path: Path, **extra: str) -> PolicySources:
    """The shipped rego/ and policies/ copied under ``tmp_path``, with ``extra`` modules
    (file name without .rego → text) added."""
    rego, policies = tmp_path / "rego", tmp_path / "policies"
    shutil.copytree(REPO / "rego", rego)
    shutil.copytree(REPO / "policies", policies)
    for name, text in extra.items():
        (rego / f"{name}.rego").write_text(textwrap.dedent(text), encoding="utf-8")
    return load_policy_sources(rego, policies)


def scratch(tmp_path: Path, text: str) -> PolicySources:
    """One module, the shipped data."""
    rego = tmp_path / "rego"
    rego.mkdir()
    (rego / "policy.rego").write_text(text, encoding="utf-8")
    return load_policy_sources(rego, REPO / "policies")


@asynccontextmanager
async def backend(
    kind: str, sources: PolicySources, opa_server: type[StandIn] = StandIn, timeout: float = 5
) -> AsyncIterator[PolicyBackend]:
    if kind == "embedded":
        embedded = EmbeddedPolicy(sources)
        try:
            yield embedded
        finally:
            await embedded.aclose()
        return
    with standin(sources, opa_server) as server:
        opa = OpaPolicy(sources, server.url, timeout=timeout)
        await opa.open()
        try:
            yield opa
        finally:
            await opa.aclose()


def runtime(tmp_path: Path, sources: PolicySources, policy: PolicyBackend) -> Runtime:
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    return Runtime(
        settings=load_settings(REPO / "toolgate.yaml", env={}),
        catalogue=load_catalogue(REPO / "tools.d"),
        policy=policy,
        policy_data=PolicyData.parse(sources.data),
        workspaces={"demo": Workspace("demo", root.resolve())},
        store=cast(Store, None),  # a listing reads no store
        adapters={},
    )


def names(
    tmp_path: Path,
    kind: str,
    sources: PolicySources,
    principal: str,
    check: Callable[[Runtime], Any] | None = None,
) -> set[str]:
    async def main() -> set[str]:
        async with backend(kind, sources) as policy:
            services = runtime(tmp_path, sources, policy)
            listed = await catalogue.visible(services, principal, "demo", (), "api_key")
            if check is not None:
                await check(services)
            return {t.name for t in listed}

    return asyncio.run(main())


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_tool_only_a_call_without_arguments_is_refused_is_listed(
    tmp_path: Path, kind: str
) -> None:
    sources = project(tmp_path, needs_path=NEEDS_PATH)

    async def a_real_call_is_allowed(services: Runtime) -> None:
        tool = services.catalogue.resolve("fs.read_file", None)
        probe = catalogue.probe(
            catalogue.listing_input(services, "alice", "demo", tool, (), "api_key")
        )
        real = {**probe, "arguments": {"path": "a.txt"}}
        real["paths"] = [{"argument": "path", "relative": "a.txt", "inside_workspace": True}]
        assert (await services.policy.decide(real)).result is DecisionResult.ALLOW
        assert (await services.policy.decide(probe)).result is DecisionResult.DENY

    listed = names(tmp_path, kind, sources, "alice", a_real_call_is_allowed)
    assert {"fs.read_file", "fs.write_file"} <= listed


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_tool_the_principal_can_never_call_is_not_listed(tmp_path: Path, kind: str) -> None:
    listed = names(tmp_path, kind, project(tmp_path), "bob")  # approver: low-risk tools only
    assert "fs.read_file" in listed
    assert "fs.write_file" not in listed and "proc.python" not in listed
    assert names(tmp_path, kind, project(tmp_path / "x"), "mallory") == set()  # unknown actor


@pytest.mark.parametrize("kind", BACKENDS)
def test_an_error_in_the_listing_rule_leaves_the_tool_out_with_one_warning(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    sources = project(tmp_path, broken=BROKEN)
    with caplog.at_level(logging.WARNING, logger="toolgate.listing"):
        listed = names(tmp_path, kind, sources, "alice")
    assert "fs.read_file" not in listed and "fs.write_file" not in listed
    assert "fs.list_dir" in listed  # the others are answered
    warnings = [r for r in caplog.records if r.name == "toolgate.listing"]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "2 tool(s) left out" in warnings[0].getMessage()


@pytest.mark.parametrize(
    ("rule", "cause"),
    [
        ("listed := input.tool.name\n", "not a boolean"),
        ('listed if input.tool.name == "fs.list_dir"\n', "undefined"),
    ],
)
def test_an_answer_that_is_not_a_boolean_lists_nothing(
    tmp_path: Path, rule: str, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    text = 'package toolgate\n\ndecision := {"result": "allow", "reasons": []}\n\n' + rule
    with caplog.at_level(logging.WARNING, logger="toolgate.listing"):
        listed = names(tmp_path, "embedded", scratch(tmp_path, text), "alice")
    assert listed == ({"fs.list_dir"} if cause == "undefined" else set())
    assert cause in caplog.text


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_policy_without_the_listing_rule_is_asked_about_a_probe_call(
    tmp_path: Path, kind: str
) -> None:
    assert names(tmp_path, kind, scratch(tmp_path, NO_LISTING_RULE), "alice") == {"fs.read_file"}


def test_an_unknown_workspace_lists_nothing_without_asking(tmp_path: Path) -> None:
    async def main() -> list[Any]:
        sources = project(tmp_path)
        async with backend("embedded", sources) as policy:
            return await catalogue.visible(runtime(tmp_path, sources, policy), "alice", "nowhere")

    assert asyncio.run(main()) == []


class HangsOnListed(Hanging):
    hangs = "/v1/data/toolgate/listed"


class HangsOnDecision(Hanging):
    hangs = "/v1/data/toolgate/decision"


@pytest.mark.parametrize(
    ("opa_server", "text"), [(HangsOnListed, None), (HangsOnDecision, NO_LISTING_RULE)]
)
def test_a_hung_opa_holds_a_listing_about_one_timeout_whatever_the_number_of_tools(
    tmp_path: Path,
    opa_server: type[StandIn],
    text: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Asked one tool after the other, a listing took tools x opa_timeout (seconds with a hung
    # OPA). The bound asserted is far above the fix's (one timeout; three for the probe calls,
    # 8 at a time) and below the old cost, so it cannot flake.
    sources = project(tmp_path) if text is None else scratch(tmp_path, text)
    timeout = 0.2

    async def main() -> tuple[int, float, list[Any]]:
        async with backend("opa", sources, opa_server, timeout) as policy:
            services = runtime(tmp_path, sources, policy)
            count = len(catalogue.candidates(services))
            start = time.monotonic()
            listed = await catalogue.visible(services, "alice", "demo", (), "api_key")
            return count, time.monotonic() - start, listed

    with caplog.at_level(logging.WARNING, logger="toolgate.listing"):
        count, elapsed, listed = asyncio.run(main())
    assert count >= 10 and listed == []  # fail closed
    assert elapsed < (count - 1) * timeout, f"{elapsed:.2f} s for {count} tools"
    warnings = [r.getMessage() for r in caplog.records if r.name == "toolgate.listing"]
    if text is None:  # one warning for the listing, naming how many and the first cause
        assert len(warnings) == 1, warnings
        assert f"{count} tool(s) left out" in warnings[0]
        assert "OPA did not answer within 200 ms" in warnings[0]
    else:  # the probe calls are decisions: each denied one is the OPA backend's to log
        assert warnings == []


def test_one_principals_listings_held_by_a_hung_opa_do_not_hold_anyone_elses(
    tmp_path: Path,
) -> None:
    """``mcp.max_listings_per_principal``: a principal's ``tools/list`` past its share is
    refused at once (-32029, ``too_many_listings``) while its first one waits on a hung OPA,
    another principal's is still asked, and the slot comes back when the first ends. Through
    the gateway's ASGI app, its MCP door and its admission."""
    config = make_project(tmp_path, f"sqlite:///{tmp_path}/toolgate.db")
    sources = load_policy_sources(tmp_path / "rego", tmp_path / "policies")
    headers = {
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/list",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }

    async def main(server: Hanging) -> dict[str, Any]:
        settings = yaml.safe_load(config.read_text())
        settings.update(policy_backend="opa", opa_url=server.url, opa_timeout=1.5)
        settings["mcp"] = {**settings.get("mcp", {}), "max_listings_per_principal": 1}
        config.write_text(yaml.safe_dump(settings))
        app = create_app(load_settings(config))
        seen: dict[str, Any] = {}
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://127.0.0.1:8080"
            ) as c:

                async def listing(key: str) -> tuple[float, dict[str, Any]]:
                    start = time.monotonic()
                    sent = {**headers, "Authorization": f"Bearer {key}"}
                    answer = await c.post("/mcp", json=body, headers=sent)
                    assert answer.status_code == 200, answer.text
                    return time.monotonic() - start, rpc_message(answer.text)

                first = asyncio.ensure_future(listing(ALICE))
                await until(lambda: server.in_flight > 0, "alice's first listing to wait on OPA")
                seen["again"] = await listing(ALICE)
                seen["bob"], seen["first"] = await asyncio.gather(listing(BOB), first)
                seen["after"] = await listing(ALICE)
        return seen

    with standin(sources, HangsOnListed) as server:
        seen = asyncio.run(main(server))
    elapsed, again = seen["again"]
    assert elapsed < 1.0, elapsed  # refused at once, not after OPA's timeout
    error = again["error"]
    assert error["code"] == -32029, again
    assert "at most 1 at once, mcp.max_listings_per_principal" in error["message"], again
    assert error["data"]["type"] == "too_many_listings", again
    assert error["data"]["setting"] == "mcp.max_listings_per_principal", again
    for who in ("first", "bob", "after"):  # asked, and fail closed when OPA does not answer
        assert seen[who][1]["result"]["tools"][0]["name"] == "toolgate.execution_status", (
            who,
            seen[who],
        )
        assert len(seen[who][1]["result"]["tools"]) == 1, (who, seen[who])


def rpc_message(text: str) -> dict[str, Any]:
    """The JSON-RPC message of an answer, a JSON body or the last ``data:`` of an event
    stream."""
    if text.lstrip().startswith("{"):
        return cast(dict[str, Any], json.loads(text))
    data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    return cast(dict[str, Any], json.loads(data[-1]))
