"""Stage resolve (gateway/pipeline/resolve.py): the exact tool version from the catalogue."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.errors import ResolveError
from gateway.pipeline import resolve
from gateway.pipeline.records import Requested
from gateway.store.store import Store
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    request,
)

pytestmark = pytest.mark.anyio


async def test_resolve_names_the_exact_version_and_says_so(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    start = Requested.start(request("fs.read_file", arguments={"path": "a.txt"}))
    resolved = await resolve.run(services, start)
    assert resolved.tool.name == "fs.read_file" and resolved.ticket is start.ticket
    event = resolved.trail.events[-1]
    assert event.type == "tool.resolved" and event.seq == 1 and resolved.trail.seq == 2
    assert event.data["version"] == str(resolved.tool.version)


async def test_an_unknown_tool_is_a_resolve_error(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    with pytest.raises(ResolveError):
        await resolve.run(services, Requested.start(request("no.such_tool")))
