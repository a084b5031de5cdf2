"""The periodic checkpoint writer of several replicas, and the signing key's checks."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from gateway.audit.checkpoints import checkpoint_periodically
from gateway.audit.keys import Verifier, load_signer
from gateway.audit.verify import verify
from gateway.errors import ConfigError
from gateway.settings import load_settings
from gateway.store.store import Store
from tests.audit.helpers import fill, toolgate_here


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
                await anyio.sleep(0.15)
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
