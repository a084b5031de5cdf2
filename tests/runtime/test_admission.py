"""The gauges of the bounds on load (gateway/runtime/admission.py), the check of the queue on
a real SQLite store, and the settings that bound them. The doors are tested against a real
gateway in tests/integration/test_bounded_load.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.errors import ConfigError, Overloaded, TooManyRequests
from gateway.runtime.admission import Admission, Bound, Gauge, check_queued
from gateway.settings import Settings, load_settings
from gateway.store.store import Store


def _gauge(share: int = 2, total: int = 3) -> Gauge:
    return Gauge(Bound("things", "too_many_things", "share_s", share, "total_s", total, 7))


def test_a_share_then_the_total_then_given_back() -> None:
    gauge = _gauge()
    gauge.take("a")
    gauge.take("a")
    with pytest.raises(TooManyRequests) as share:
        gauge.take("a")
    assert share.value.code == "too_many_things" and share.value.http_status == 429
    assert share.value.retry_after == 7 and share.value.retryable
    assert share.value.details == {"setting": "share_s", "limit": 2, "retry_after": 7}
    gauge.take("b")
    with pytest.raises(Overloaded) as total:
        gauge.take("c")  # c holds nothing, but everyone holds the total
    assert total.value.code == "overloaded" and total.value.http_status == 503
    assert total.value.details["setting"] == "total_s"
    assert gauge.held() == 3 and gauge.held("a") == 2 and gauge.full() == {"a"}
    gauge.give_back("a")
    gauge.take("c")
    assert gauge.holders() == {"a", "b", "c"} and gauge.full() == frozenset()


def test_hold_gives_back_however_the_block_ends_and_force_passes_the_bounds() -> None:
    gauge = _gauge(share=1, total=1)
    with pytest.raises(RuntimeError), gauge.hold("a"):
        raise RuntimeError("boom")
    assert gauge.held() == 0
    with gauge.hold("a"):
        with pytest.raises(TooManyRequests):
            gauge.check("a")
        with gauge.hold("a", force=True):  # admitted work is counted, never refused
            assert gauge.held("a") == 2
    assert gauge.held() == 0 and gauge.holders() == frozenset()
    gauge.give_back("nobody")  # giving back what was never taken changes nothing
    assert gauge.held() == 0


def test_admission_takes_its_bounds_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(base_dir=tmp_path, max_executions_per_principal=3, max_waiters_total=90)
    admission = Admission(settings)
    assert admission.executions.bound.share == 3
    assert admission.waiters.bound.total == 90
    assert admission.sessions.bound.share == settings.mcp.max_sessions_per_principal
    assert admission.streams.bound.code == "too_many_streams"
    assert admission.listings.bound.share_setting == "mcp.max_listings_per_principal"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("max_executions_per_principal", 300, "max_executions_per_principal (300) is above"),
        ("max_queued_per_principal", 20_000, "max_queued_per_principal (20000) is above"),
        ("mcp", {"max_sessions_per_principal": 2000}, "mcp.max_sessions_per_principal (2000)"),
        ("mcp", {"max_listings_per_principal": 65}, "mcp.max_listings_per_principal (65)"),
    ],
)
def test_a_share_above_its_total_is_refused_at_load(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    config = tmp_path / "toolgate.yaml"
    config.write_text("port: 8080\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(config, env={}, **{key: value})
    assert message in str(refused.value)


@pytest.mark.anyio
async def test_check_queued_counts_an_empty_queue_as_room(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'toolgate.db'}")
    await store.open()
    try:
        settings = Settings(base_dir=tmp_path, max_queued_per_principal=1, max_queued_total=1)
        await check_queued(store, settings, "alice")  # nothing queued: room
        assert await store.queued_counts("alice", 5, 5) == (0, 0)
        assert await store.pending_approvals("alice", 0, 5) == 0
    finally:
        await store.aclose()
