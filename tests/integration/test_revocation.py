"""A revoked API key is refused at once by every replica: two gateway processes on one
PostgreSQL database, ``toolgate keys revoke`` between two requests, no wait."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import httpx
import pytest
import yaml

from gateway.cli import main
from gateway.settings import hash_key
from gateway.testing import gateway, make_project
from tests.helpers import ALICE

pytestmark = [pytest.mark.slow, pytest.mark.postgres]
SPARE = "tg_alice_spare_key"


def _project(root: Path, database_url: str) -> Path:
    config_path = make_project(root, database_url)
    config = yaml.safe_load(config_path.read_text())
    alice = next(p for p in config["principals"] if p["id"] == "alice")
    alice["keys"] = [{"id": "alice-spare", "sha256": hash_key(SPARE)}]
    config_path.write_text(yaml.safe_dump(config))
    return config_path


def _status(url: str, key: str) -> tuple[int, str]:
    response = httpx.get(url + "/v1/tools", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return response.status_code, response.json().get("code", "") if response.is_error else ""


def _toolgate(config: Path, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["--config", str(config), *args])
    return code, out.getvalue()


def test_a_revocation_holds_on_every_replica_as_soon_as_it_commits(
    tmp_path: Path, pg_url: str
) -> None:
    config = _project(tmp_path, pg_url)
    with gateway(config) as first, gateway(config) as second:
        for url in (first, second):
            assert _status(url, SPARE) == (200, "")
        code, said = _toolgate(config, "keys", "revoke", "alice-spare", "--by", "secops")
        assert code == 0 and "revoked key alice-spare" in said
        for url in (first, second, first):
            assert _status(url, SPARE) == (401, "api_key_revoked")
            assert _status(url, ALICE) == (200, "")  # alice's other key is untouched
        assert _toolgate(config, "keys", "unrevoke", "alice-spare")[0] == 0
        for url in (second, first):
            assert _status(url, SPARE) == (200, "")
