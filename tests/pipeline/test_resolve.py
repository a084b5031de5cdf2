"""Stage resolve (gateway/pipeline/resolve.py): the exact tool version from the catalogue."""

from __future__ import annotations

import pytest

from gateway.errors import ResolveError
from gateway.pipeline import resolve
from gateway.pipeline.records import Requested
from gateway.pipeline.services import Services
from tests.pipeline.fakes import request

pytestmark = pytest.mark.anyio


async def test_resolve_names_the_exact_version_and_says_so(services: Services) -> None:
    start = Requested.start(request("fs.read_file", arguments={"path": "a.txt"}))
    resolved = await resolve.run(services, start)
    assert resolved.tool.name == "fs.read_file" and resolved.ticket is start.ticket
    event = resolved.trail.events[-1]
    assert event.type == "tool.resolved" and event.seq == 1 and resolved.trail.seq == 2
    assert event.data["version"] == str(resolved.tool.version)


async def test_an_unknown_tool_is_a_resolve_error(services: Services) -> None:
    with pytest.raises(ResolveError):
        await resolve.run(services, Requested.start(request("no.such_tool")))
