"""The hash chain of an execution's events (docs/security.md#audit-trail).

Each stored event carries ``prev``, the hash of the event before it in the same execution
(:data:`GENESIS` for the first), and ``hash``, the SHA-256 of its stored columns and ``prev``
encoded as the compact JSON array ``[FORMAT, prev, execution_id, seq, id, type, version,
at_ms, data_json]`` (``data_json`` the stored text of the event's data, as a JSON string), in
UTF-8. An external tool verifies a chain with nothing but this page. The array's strings
escape only ``"``, ``\\`` and control characters and its numbers are plain integers, so it is
also that array's RFC 8785 (JCS) canonical form. :func:`chain` writes it, the only writer.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from json.encoder import encode_basestring

FORMAT = "toolgate.event.v1"
"""The first element of every hashed array: a later encoding gets another name."""
GENESIS = "0" * 64
"""The ``prev`` of an execution's first event (seq 0)."""

_FORMAT_JSON = encode_basestring(FORMAT)


def chain(
    prev: str, execution_id: str, rows: Iterable[tuple[int, str, str, int, int, str]]
) -> list[str]:
    """The hash of each event of one execution in turn, each linked to the one before it (the
    first to ``prev``): ``rows`` are (seq, event_id, type, version, at_ms, data_json). The
    store's chaining, recovery's migrations and ``audit verify`` all hash with it."""
    q, sha256, digests = encode_basestring, hashlib.sha256, []
    xid, prev_json = q(execution_id), q(prev)
    for seq, event_id, type_, version, at_ms, data_json in rows:
        # The hashed array, the one spelling of the format: each string as the JSON encoder
        # writes it (encode_basestring), each integer as its digits.
        text = (
            f"[{_FORMAT_JSON},{prev_json},{xid},{seq},{q(event_id)},{q(type_)},"
            f"{version},{at_ms},{q(data_json)}]"
        )
        digest = sha256(text.encode()).hexdigest()
        digests.append(digest)
        prev_json = f'"{digest}"'  # a hex digest is its own JSON string
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
    """The hex SHA-256 of one event's array: the value stored in the event's ``hash``."""
    return chain(prev, execution_id, [(seq, event_id, type_, version, at_ms, data_json)])[0]
