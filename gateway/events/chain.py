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
from collections.abc import Iterable
from json.encoder import encode_basestring

FORMAT = "toolgate.event.v1"
"""The first element of every hashed array: a later encoding gets another name."""
FORMAT_JSON = encode_basestring(FORMAT)
GENESIS = "0" * 64
"""The ``prev`` of an execution's first event (seq 0)."""


def _text(
    prev_json: str,
    execution_id_json: str,
    seq: int,
    event_id: str,
    type_: str,
    version: int,
    at_ms: int,
    data_json: str,
) -> str:
    """The hashed array, the one spelling of the format: each string as ``encode_basestring``
    writes it (how the JSON encoder writes a string), each integer as its digits."""
    q = encode_basestring
    return (
        f"[{FORMAT_JSON},{prev_json},{execution_id_json},{seq},{q(event_id)},{q(type_)},"
        f"{version},{at_ms},{q(data_json)}]"
    )


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
    """The bytes an event's hash is taken over."""
    q = encode_basestring
    return _text(q(prev), q(execution_id), seq, event_id, type_, version, at_ms, data_json).encode()


def chain(
    prev: str, execution_id: str, rows: Iterable[tuple[int, str, str, int, int, str]]
) -> list[str]:
    """The hash of each event of one execution in turn, each linked to the one before it (the
    first to ``prev``): ``rows`` are (seq, event_id, type, version, at_ms, data_json). What
    the store writes events with: the execution's id escaped once, and each ``prev`` after
    the first a hex digest, which is its own JSON string."""
    xid, prev_json = encode_basestring(execution_id), encode_basestring(prev)
    sha256, digests = hashlib.sha256, []
    for seq, event_id, type_, version, at_ms, data_json in rows:
        text = _text(prev_json, xid, seq, event_id, type_, version, at_ms, data_json)
        digest = sha256(text.encode()).hexdigest()
        digests.append(digest)
        prev_json = f'"{digest}"'
    return digests


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
