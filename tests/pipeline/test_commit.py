"""Stage commit (gateway/pipeline/commit.py): the result and its events in one transaction."""

from __future__ import annotations

import pytest

from gateway.errors import Conflict, PolicyDenied
from gateway.pipeline import commit
from gateway.pipeline.outcomes import failed
from gateway.pipeline.records import Requested
from gateway.pipeline.services import Services
from gateway.store.store import Store
from gateway.types import Status
from tests.pipeline.fakes import prepared, request

pytestmark = pytest.mark.anyio


async def test_a_call_refused_before_reservation_is_written_once_with_its_events(
    services: Services, store: Store
) -> None:
    state = await prepared(services, request())
    ended = await commit.run(services, failed(state, PolicyDenied("no")))
    assert ended.record.status is Status.COMPLETED and ended.record.outcome == "failed"
    assert ended.record.risk is None  # refused before reservation: it does not count
    assert ended.release_locks is False
    stored = await store.get_execution(state.call.execution_id)
    assert stored is not None and stored.arguments_sha256 == state.call.arguments_sha256
    types = [e.type for e in await store.events(stored.id)]
    assert types == ["tool.requested", "tool.resolved", "tool.completed"]


async def test_a_reused_call_id_is_answered_by_the_first_call_or_refused(
    services: Services,
) -> None:
    first = await commit.run(services, failed(Requested.start(request()), PolicyDenied("no")))
    again = await commit.run(services, failed(Requested.start(request()), PolicyDenied("no")))
    assert again.record.id == first.record.id
    other = request(arguments={"path": "b.txt", "content": "hi"})
    with pytest.raises(Conflict):
        await commit.run(services, failed(Requested.start(other), PolicyDenied("no")))
