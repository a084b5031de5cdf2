"""Constants and helpers the tests share. Fixtures live in conftest.py; a test imports
from here, never from a conftest (tests/test_hygiene.py checks it)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PG_HOST = os.environ.get("TOOLGATE_TEST_PG_HOST", "127.0.0.1")
PG_USER = os.environ.get("TOOLGATE_TEST_PG_USER", "postgres")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
FUZZ_SCALE = max(1, int(os.environ.get("TOOLGATE_FUZZ_SCALE", "1") or "1"))
"""Multiplies the examples of the fuzzers and property tests (tests/fuzz, tests/security):
1 in the suite and CI (bounded), more for a longer run (``make fuzz FUZZ_SCALE=20``)."""

ALICE = "tg_dev_alice"
BOB = "tg_dev_bob"
CAROL = "tg_dev_carol"


def pg_admin() -> Any:
    """An autocommit connection to the PostgreSQL server's ``postgres`` database."""
    import psycopg

    return psycopg.connect(
        host=PG_HOST, user=PG_USER, dbname="postgres", connect_timeout=3, autocommit=True
    )


REVIEWED_TOOL = """\
name: fs.write_reviewed
version: 1.0.0
description: Replace a text file once a person has read (and maybe corrected) it.
adapter: file
operation: atomic_replace
risk: high
side_effect: write
input:
  path: {type: string, required: true, empty: false}
  content: {type: string, required: true}
  create_dirs: {type: boolean, default: true}
paths: [path]
approval:
  editable: [path, content]
locks:
  - {key: "ws:{workspace.id}:file:{arguments.path}"}
verify:
  - {probe: file_sha256, path: "{arguments.path}", equals: "{sha256(arguments.content)}"}
"""
"""A high-risk write (so the shipped policy asks for approval) whose path and content an
approver may edit (``approval.editable``): for the edit-before-approve tests."""


# --- docker-compose.yml (tests/test_deploy.py, tests/integration/test_proxy.py) -----------

COMPOSE_GATEWAYS = ("gateway-1", "gateway-2")
"""The gateway replicas of docker-compose.yml."""


def env_default(value: str) -> str:
    """``${NAME:-default}`` → default (what ``docker compose up`` uses when NAME is unset)."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", value)


def gateway_volumes(compose: dict[str, Any]) -> dict[str, str]:
    """The named volumes of the compose file mounted on its gateway replicas: each volume's
    mount point, which must be the same on every replica (what they share)."""
    named = compose.get("volumes") or {}
    found = [
        {
            volume.split(":")[0]: volume.split(":")[1]
            for volume in compose["services"][name].get("volumes", [])
            if volume.split(":")[0] in named
        }
        for name in COMPOSE_GATEWAYS
    ]
    assert all(mounts == found[0] for mounts in found), found
    return found[0]
