"""The periodic checkpoint writer of several replicas, and the signing key's checks."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import anyio
import pytest

from gateway.audit import checkpoints
from gateway.audit.chains import check_chain
from gateway.audit.checkpoints import (
    GENESIS,
    body,
    body_of,
    checkpoint_periodically,
    heads_of,
    make_checkpoint,
)
from gateway.audit.keys import Verifier, load_signer
from gateway.audit.verify import verify
from gateway.errors import ConfigError
from gateway.events.model import make_event
from gateway.jsontext import canonical
from gateway.settings import load_settings
from gateway.store.audit import CheckpointLink
from gateway.store.store import Store
from tests.audit.helpers import fill, toolgate_here
from tests.helpers import until


@pytest.mark.anyio
async def test_periodic_writers_of_two_replicas_keep_one_chain_of_checkpoints(
    project: Path, database_url: str
) -> None:
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=database_url)
    signer = load_signer(settings)
    replicas = [Store(database_url), Store(database_url)]
    for store in replicas:
        await store.open()
    try:
        async with anyio.create_task_group() as tg:
            for store in replicas:
                tg.start_soon(checkpoint_periodically, store, signer, 0.05)
            for i in range(6):
                await fill(replicas[i % 2], [f"ex_{i}"])
                await until(partial(_checkpointed, replicas[i % 2], f"ex_{i}"), f"ex_{i} signed")
            tg.cancel_scope.cancel()
        written = await replicas[0].audit_checkpoints(0, 100)
        assert len(written) >= 2 and [c.seq for c in written] == list(range(1, len(written) + 1))
        assert {c.key_id for c in written} == {signer.key_id}
        report = await verify(replicas[1], Verifier([signer.public]))
        assert report.ok, [f.line() for f in report.faults]
        assert report.heads == 6 and report.checkpoints == len(written)
    finally:
        for store in replicas:
            await store.aclose()


async def _checkpointed(store: Store, execution_id: str) -> bool:
    """Whether a checkpoint holds a head of ``execution_id``'s chain."""
    written = await store.audit_checkpoints(0, 1000)
    return any(head[0] == execution_id for c in written for head in heads_of(c))


def test_a_bad_signing_key_is_a_clear_configuration_error(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = project / "audit.pem"
    key.write_text("not a key\n")
    config = project / "toolgate.yaml"
    config.write_text(config.read_text() + "\naudit:\n  signing_key: audit.pem\n")
    settings = load_settings(config, env={})
    with pytest.raises(ConfigError, match=r"audit\.signing_key: .*audit\.pem is not"):
        load_signer(settings)
    url = f"sqlite:///{project / 'var' / 'toolgate.db'}"
    code, _, err = toolgate_here(project, url, "audit", "public-key", capsys=capsys)
    assert code == 2 and "audit.signing_key" in err and "Traceback" not in err
    key.unlink()
    with pytest.raises(ConfigError, match="cannot read"):
        load_signer(settings)


@pytest.mark.anyio
async def test_a_first_periodic_checkpoint_covers_what_moved_lately_and_all_covers_the_rest(
    project: Path, database_url: str
) -> None:
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=database_url)
    signer = load_signer(settings)
    store = Store(database_url)
    await store.open()
    try:
        await fill(store, ["ex_old", "ex_new"])
        await store._write(  # ex_old's events made long ago (ids begin with their time)
            lambda db: db.run(
                "UPDATE events SET id = 'ev_000000000000' || id WHERE execution_id = 'ex_old'"
            )
        )
        first = await make_checkpoint(store, signer, first_window_ms=60_000)
        assert first.record is not None and heads_of(first.record) == [
            ("ex_new", 5, (await store.audit_chain("ex_new"))[-1].hash)
        ]
        rest = await make_checkpoint(store, signer, everything=True)
        assert rest.record is not None and [h[0] for h in heads_of(rest.record)] == ["ex_old"]
        report = await verify(store, Verifier([signer.public]))
        assert report.heads == 2 and report.checkpoints == 2
        # (the ids changed above are in the hashes: the rows of ex_old show as edited)
        assert {(f.what, f.execution_id) for f in report.faults} == {("edited", "ex_old")}
    finally:
        await store.aclose()


@pytest.mark.anyio
async def test_two_replicas_appending_to_one_execution_extend_one_chain(database_url: str) -> None:
    replicas = [Store(database_url), Store(database_url)]
    for store in replicas:
        await store.open()
    try:
        await fill(replicas[0], ["ex_shared"])

        async def append(store: Store, n: int) -> None:
            for i in range(n):
                event = make_event("ex_shared", 0, "tool.output", {"i": i, "by": id(store)})
                await store.append("ex_shared", [event])

        async with anyio.create_task_group() as tg:
            for store in replicas:
                for _ in range(3):
                    tg.start_soon(append, store, 8)
        rows = await replicas[1].audit_chain("ex_shared")
        assert [r.seq for r in rows] == list(range(6 + 48))
        assert check_chain(rows) == []
    finally:
        for store in replicas:
            await store.aclose()


def test_the_signed_body_made_from_the_heads_json_is_the_body_verify_rebuilds() -> None:
    heads = [("ex_a", 3, "f" * 64), ("ex_b", 12, "0" * 64)]
    heads_json = canonical([list(h) for h in heads])
    assert body_of(7, 1_700_000_000_000, GENESIS, heads_json) == body(
        7, 1_700_000_000_000, GENESIS, heads
    )


@pytest.mark.anyio
async def test_the_last_link_is_read_without_the_heads_and_a_checkpoint_is_then_trimmed(
    project: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The periodic writer asks only whether the last checkpoint is fresh (its heads are a
    megabyte a busy minute), and gives the memory a checkpoint freed back (allocator.trim)."""
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=database_url)
    signer = load_signer(settings)
    trims: list[int] = []
    monkeypatch.setattr(checkpoints, "trim", lambda: trims.append(1) or True)
    store = Store(database_url)
    await store.open()
    try:
        assert await store.audit_last_link() is None
        await fill(store, ["ex_a", "ex_b"])
        written = (await make_checkpoint(store, signer)).record
        assert written is not None
        link = await store.audit_last_link()
        assert link == CheckpointLink(written.seq, written.at_ms, written.digest)
        assert not hasattr(link, "heads_json")
        with anyio.move_on_after(0.5):
            await checkpoint_periodically(store, signer, 0.05)
        assert trims  # after each pass, written or not
    finally:
        await store.aclose()
