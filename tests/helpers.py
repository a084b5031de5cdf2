"""Constants and helpers the tests share. Fixtures live in conftest.py; a test imports
from here, never from a conftest (tests/test_hygiene.py checks it)."""

from __future__ import annotations

import os
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
