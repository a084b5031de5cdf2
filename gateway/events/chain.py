"""The hash chain of an execution's events (docs/security.md#audit-trail).

Each stored event carries ``prev``, the hash of the event before it in the same execution
(:data:`GENESIS` for the first), and ``hash``, the SHA-256 of :func:`encoding` of its stored
columns and ``prev``. An external tool verifies a chain with nothing but this page: the
encoding is the compact JSON array ``[FORMAT, prev, execution_id, seq, id, type, version,
at_ms, data_json]`` (``data_json`` the stored text of the event's data, as a JSON string), in
UTF-8. Its strings escape only ``"``, ``\\`` and control characters and its numbers are plain
integers, so it is also that array's RFC 8785 (JCS) canonical form.
"""

from __future__ import annotations

import hashlib

from gateway.jsontext import canonical

FORMAT = "toolgate.event.v1"
"""The first element of every hashed array: a later encoding gets another name."""
GENESIS = "0" * 64
"""The ``prev`` of an execution's first event (seq 0)."""


def encoding(
    prev: str,
    execution_id: str,
    seq: int,
    event_id: str,
    type_: str,
    version: int,
    at_ms: int,
    data_json: str,
) -> bytes:
    """The bytes an event's hash is taken over: the one writer of this format (the store's
    chaining, recovery's migrations and ``audit verify`` all call it)."""
    row = [FORMAT, prev, execution_id, seq, event_id, type_, version, at_ms, data_json]
    return canonical(row).encode("utf-8")


def event_hash(
    prev: str,
    execution_id: str,
    seq: int,
    event_id: str,
    type_: str,
    version: int,
    at_ms: int,
    data_json: str,
) -> str:
    """The hex SHA-256 of :func:`encoding`: the value stored in the event's ``hash``."""
    data = encoding(prev, execution_id, seq, event_id, type_, version, at_ms, data_json)
    return hashlib.sha256(data).hexdigest()
