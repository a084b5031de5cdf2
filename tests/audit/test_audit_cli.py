"""``toolgate audit`` on real SQLite and PostgreSQL stores: a trail written through the
store's append path, tampered with in SQL the way an insider would, and each change found and
named by ``audit verify`` run as a real process (the other commands run in this process)."""

from __future__ import annotations

import hashlib
import json
from itertools import pairwise
from pathlib import Path

import anyio
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from gateway.audit.checkpoints import body, make_checkpoint
from gateway.audit.keys import Signer, load_signer
from gateway.events.chain import event_hash
from gateway.events.model import make_event
from gateway.settings import load_settings
from gateway.store.store import Store
from gateway.store.tables import SCHEMA_VERSION
from tests.audit.helpers import external_hash, fill, filled, sql, toolgate, toolgate_here

KINDS = ("edit", "delete", "swap", "insert", "tail", "gone", "rewrite", "clean")
IDS = {name: f"ex_{name}" for name in KINDS}
Capture = pytest.CaptureFixture[str]


def chain_of(url: str, ex_id: str) -> list[tuple[str, int, str, str]]:
    return [
        (r[0], int(r[1]), r[2], r[3])
        for r in sql(
            url,
            ("SELECT id, seq, prev, hash FROM events WHERE execution_id = ? ORDER BY seq", [ex_id]),
        )
    ]


def tamper(url: str) -> None:
    """One change per execution, each in SQL around the gateway."""
    x = IDS
    edited = '{"result":"deny"}'
    head = chain_of(url, x["rewrite"])[-1]
    rows = sql(
        url,
        (
            "SELECT id, type, version, at_ms, prev FROM events WHERE execution_id = ? AND seq = 5",
            [x["rewrite"]],
        ),
    )
    eid, type_, version, at_ms, prev = rows[0]
    rehashed = event_hash(prev, x["rewrite"], 5, eid, type_, version, at_ms, edited)
    before_insert = chain_of(url, x["insert"])[1]
    forged = ("ev_forged", x["insert"], 2, "tool.output", 1, 1, '{"text":"forged"}')
    forged_hash = event_hash(before_insert[3], *forged[1:3], forged[0], *forged[3:])
    sql(
        url,
        ("UPDATE events SET data_json = ? WHERE execution_id = ? AND seq = 2", [edited, x["edit"]]),
        ("DELETE FROM events WHERE execution_id = ? AND seq = 3", [x["delete"]]),
        ("UPDATE events SET seq = -1 WHERE execution_id = ? AND seq = 1", [x["swap"]]),
        ("UPDATE events SET seq = 1 WHERE execution_id = ? AND seq = 2", [x["swap"]]),
        ("UPDATE events SET seq = 2 WHERE execution_id = ? AND seq = -1", [x["swap"]]),
        ("UPDATE events SET seq = seq + 100 WHERE execution_id = ? AND seq >= 2", [x["insert"]]),
        ("UPDATE events SET seq = seq - 99 WHERE execution_id = ? AND seq >= 100", [x["insert"]]),
        (
            "INSERT INTO events (id, execution_id, seq, type, version, at_ms, data_json, prev, "
            "hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [*forged, before_insert[3], forged_hash],
        ),
        ("DELETE FROM events WHERE execution_id = ? AND seq >= 4", [x["tail"]]),
        ("DELETE FROM events WHERE execution_id = ?", [x["gone"]]),
        ("DELETE FROM executions WHERE id = ?", [x["gone"]]),
        ("UPDATE events SET data_json = ?, hash = ? WHERE id = ?", [edited, rehashed, head[0]]),
    )


def forge_checkpoints(url: str) -> None:
    """Checkpoint #2 edited; #3 added, linked to it but signed with the insider's own key
    over heads that would hide the deleted tail."""
    (digest,) = sql(url, ("SELECT digest FROM audit_checkpoints WHERE seq = 2", []))[0]
    insider = Signer(Ed25519PrivateKey.generate())
    heads = [[IDS["tail"], 3, "0" * 64]]
    data = body(3, 1, digest, heads)
    values = [digest, json.dumps(heads), hashlib.sha256(data).hexdigest(), insider.key_id]
    sql(
        url,
        ("UPDATE audit_checkpoints SET at_ms = at_ms + 1 WHERE seq = 2", []),
        (
            "INSERT INTO audit_checkpoints (seq, at_ms, prev, heads_json, digest, key_id, "
            "signature, writer) VALUES (3, 1, ?, ?, ?, ?, ?, '')",
            [*values, insider.sign(data)],
        ),
    )


@pytest.mark.slow  # starts a process itself
def test_every_kind_of_tampering_is_found_and_named(
    project: Path, database_url: str, capsys: Capture
) -> None:
    filled(database_url, list(IDS.values()))
    code, out, _ = toolgate_here(project, database_url, "audit", "checkpoint", capsys=capsys)
    assert code == 0 and out.startswith("checkpoint #1: 8 heads"), out
    _, _, err = toolgate_here(project, database_url, "audit", "checkpoint", capsys=capsys)
    assert "no checkpoint written: nothing moved" in err

    async def one_more() -> None:
        store = Store(database_url)
        try:
            await store.append(IDS["clean"], [make_event(IDS["clean"], 0, "tool.output", {})])
        finally:
            await store.aclose()

    anyio.run(one_more)
    _, out, _ = toolgate_here(project, database_url, "audit", "checkpoint", capsys=capsys)
    assert out.startswith("checkpoint #2: 1 heads"), out

    code, out, err = toolgate_here(project, database_url, "audit", "verify", capsys=capsys)
    assert code == 0, out + err
    assert "audit trail intact: 8 chains, 49 events, 2 checkpoints" in err

    _, public, _ = toolgate_here(project, database_url, "audit", "public-key", capsys=capsys)
    (project / "audit.pub").write_text(public)
    code, _, err = toolgate_here(
        project, database_url, "audit", "verify", "--public-key", str(project / "audit.pub"),
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    stranger = Signer(Ed25519PrivateKey.generate())
    (project / "stranger.pub").write_text(stranger.public_pem())
    code, out, _ = toolgate_here(
        project, database_url, "audit", "verify", "--public-key", str(project / "stranger.pub"),
        capsys=capsys,
    )  # fmt: skip
    assert code == 1 and "which is not one of the verifying keys" in out

    tamper(database_url)
    forge_checkpoints(database_url)
    found = toolgate(project, database_url, "audit", "verify")
    assert found.returncode == 1, found.stderr
    lines = found.stdout.splitlines()
    x = IDS
    expected = [
        f"edited: execution {x['edit']} seq 2: its content does not match its hash",
        f"deleted: execution {x['delete']} seq 3: seq 3 missing",
        f"reordered: execution {x['swap']} seq 1: the chain puts it after seq 2",
        f"inserted: execution {x['insert']} seq 2: not on the chain",
        f"deleted: execution {x['tail']} seq 4: seq 4..5 gone from the end of the chain "
        "(checkpoint #1 recorded seq 5)",
        f"deleted: execution {x['gone']}: the whole chain is gone (checkpoint #1 recorded it "
        "up to seq 5)",
        f"edited: execution {x['rewrite']} seq 5: its hash is not the one checkpoint #1 recorded",
        "checkpoint: checkpoint #2: its content does not match its digest (edited)",
        "checkpoint: checkpoint #2: its signature does not verify (edited or forged)",
        "checkpoint: checkpoint #3: signed by key ",
    ]
    for wanted in expected:
        assert any(line.startswith(wanted) for line in lines), (wanted, found.stdout)
    assert not [line for line in lines if x["clean"] in line], found.stdout

    code, out, _ = toolgate_here(project, database_url, "audit", "verify", "--json", capsys=capsys)
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert {f["what"] for f in report["faults"]} == {
        "edited", "deleted", "reordered", "inserted", "checkpoint"
    }  # fmt: skip


def test_export_writes_json_lines_an_outside_tool_can_verify(
    project: Path, database_url: str, capsys: Capture
) -> None:
    filled(database_url, ["ex_a", "ex_b"])
    assert toolgate_here(project, database_url, "audit", "checkpoint", capsys=capsys)[0] == 0
    out = project / "trail.jsonl"
    code, _, err = toolgate_here(
        project, database_url, "audit", "export", "--out", str(out), "--checkpoints",
        capsys=capsys,
    )  # fmt: skip
    assert code == 0, err
    lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    events = [line for line in lines if line["record"] == "event"]
    assert len(events) == 12 and [e["seq"] for e in events[:6]] == list(range(6))
    for event in events:
        assert external_hash(event) == event["hash"], event
    for before, after in pairwise(events[:6]):
        assert after["prev"] == before["hash"]
    (checkpoint,) = [line for line in lines if line["record"] == "checkpoint"]
    assert sorted(h[0] for h in checkpoint["heads"]) == ["ex_a", "ex_b"]

    _, since, _ = toolgate_here(
        project, database_url, "audit", "export", "--since", "1h", capsys=capsys
    )
    assert len(since.splitlines()) == 12
    _, future, err = toolgate_here(
        project, database_url, "audit", "export", "--since", "2999-01-01T00:00:00", capsys=capsys
    )
    assert future == "" and "exported 0 events" in err
    code, _, err = toolgate_here(
        project, database_url, "audit", "verify", "--since", "yesterday-ish", capsys=capsys
    )
    assert code == 2 and "--since 'yesterday-ish'" in err


def test_verify_since_checks_the_chains_written_since(
    project: Path, database_url: str, capsys: Capture
) -> None:
    filled(database_url, ["ex_old", "ex_new"])
    sql(database_url, ("UPDATE events SET data_json = '{}' WHERE execution_id = 'ex_new'", []))
    # ex_old's events made long ago (ids begin with their time); their hashes now fail too
    sql(
        database_url,
        ("UPDATE events SET id = 'ev_000000000000' || id WHERE execution_id = 'ex_old'", []),
    )
    code, out, err = toolgate_here(
        project, database_url, "audit", "verify", "--since", "10m", capsys=capsys
    )
    assert code == 1 and "ex_new" in out and "ex_old" not in out
    assert "1 chains" in err
    code, out, _ = toolgate_here(project, database_url, "audit", "verify", capsys=capsys)
    assert code == 1 and "ex_old" in out


@pytest.mark.anyio
async def test_checkpoint_writers_of_two_replicas_write_one(
    project: Path, database_url: str
) -> None:
    settings = load_settings(project / "toolgate.yaml", env={}, database_url=database_url)
    signer = load_signer(settings)
    first, second = Store(database_url), Store(database_url)
    await first.open()
    await second.open()
    try:
        await fill(first, ["ex_1", "ex_2", "ex_3"])
        results = []

        async def write(store: Store) -> None:
            results.append(await make_checkpoint(store, signer))

        async with anyio.create_task_group() as tg:
            for store in (first, second, first, second):
                tg.start_soon(write, store)
        assert len([r for r in results if r.record is not None]) == 1
        assert [c.seq for c in await first.audit_checkpoints(0, 10)] == [1]
    finally:
        await first.aclose()
        await second.aclose()


def test_a_store_from_before_the_audit_trail_is_upgraded_and_chained(
    project: Path, database_url: str, capsys: Capture
) -> None:
    filled(database_url, ["ex_1", "ex_2"])
    chained = chain_of(database_url, "ex_1") + chain_of(database_url, "ex_2")
    sql(  # what a version 1 store looks like
        database_url,
        ("ALTER TABLE events DROP COLUMN prev", []),
        ("ALTER TABLE events DROP COLUMN hash", []),
        ("DROP TABLE audit_checkpoints", []),
        ("ALTER TABLE approvals DROP COLUMN approver_roles_json", []),  # came with version 3
        ("UPDATE schema_version SET version = 1", []),
    )
    code, _, err = toolgate_here(project, database_url, "audit", "verify", capsys=capsys)
    assert code == 2 and "schema version 1, from before the audit trail" in err
    code, _, err = toolgate_here(project, database_url, "audit", "checkpoint", capsys=capsys)
    assert code == 0, err
    assert chain_of(database_url, "ex_1") + chain_of(database_url, "ex_2") == chained
    assert sql(database_url, ("SELECT version FROM schema_version", []))[0][0] == SCHEMA_VERSION
    assert toolgate_here(project, database_url, "audit", "verify", capsys=capsys)[0] == 0
