"""Ended page sessions: one row per session signed out, read for every page it asks for.

A session of the approvals page is a signed cookie (``gateway/ui/session.py``): nothing on
the server holds it, so a copy of the cookie would outlive a sign-out until its expiry. Its
``id`` is written here when it is signed out, and every replica refuses a session whose id
is here, from the moment the row commits (read as revoked keys are read: ``keys.Revocations``
shares one read among the checks asked while one runs). A row is kept only until the
session would have expired anyway; each sign-out deletes those past it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache

from gateway.store.sql import Db, Sql, now_ms, placeholders

INSERT = Sql(
    "INSERT INTO ended_sessions (session_id, ended_ms, expires_ms) VALUES (?, ?, ?) "
    "ON CONFLICT (session_id) DO NOTHING"
)
EXPIRED = Sql("DELETE FROM ended_sessions WHERE expires_ms < ?")


@cache
def _ended_among(count: int) -> Sql:
    return Sql(f"SELECT session_id FROM ended_sessions WHERE session_id IN ({placeholders(count)})")


def ended_among(db: Db, session_ids: Sequence[str]) -> set[str]:
    """Which of ``session_ids`` were signed out (one indexed read)."""
    return {str(row[0]) for row in db.all(_ended_among(len(session_ids)), tuple(session_ids))}


def end_session(db: Db, session_id: str, expires_ms: int) -> None:
    """End ``session_id`` (which would expire at ``expires_ms``) for every replica, and
    forget the sessions that have expired since they ended."""
    now = now_ms()
    db.run(EXPIRED, (now,))
    db.run(INSERT, (session_id, now, expires_ms))
