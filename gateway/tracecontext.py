"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` a call
passes on to the upstreams its adapters reach.

An execution keeps the ``traceparent`` its request came with, or a new trace when the
request had none or a malformed one (ignored, as the recommendation says: a bad header is
not an error of the call). Each adapter call sends a child of it: the same trace id and
flags, a new parent id (the gateway's span). Their random digits come from the pool of
``gateway/ids.py`` (the operating system's generator, drawn a few kilobytes at a time, never
shared with a forked child) rather than a system call each.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from gateway.ids import random_hex

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_INVALID_TRACE_ID = "0" * 32
_INVALID_PARENT_ID = "0" * 16
SAMPLED = "01"
"""The flags of a trace the gateway starts: sampled, so that an upstream that traces
records the call (the gateway has no sampler of its own)."""


def parse(header: str) -> str | None:
    """``header`` as a version-00 ``traceparent``, or None when it is malformed.

    A later version is read by its first four fields (what version 00 defines) and passed on
    as version 00, as the recommendation asks; version ``ff`` is invalid."""
    match = _TRACEPARENT.fullmatch(header.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == _INVALID_TRACE_ID or parent_id == _INVALID_PARENT_ID:
        return None
    return f"00-{trace_id}-{parent_id}-{flags}"


def new() -> str:
    """A ``traceparent`` that starts a new trace."""
    return f"00-{random_hex(32)}-{random_hex(16)}-{SAMPLED}"


def incoming(headers: Sequence[str]) -> str:
    """The ``traceparent`` of an execution, from the request's ``traceparent`` header
    values: the one valid value, else (none, several, or malformed) a new trace."""
    found = parse(headers[0]) if len(headers) == 1 else None
    return found or new()


def child(traceparent: str | None) -> str:
    """What an adapter call sends: ``traceparent``'s trace id and flags under a new parent
    id; a new trace when there is none."""
    parsed = parse(traceparent) if traceparent else None
    if parsed is None:
        return new()
    _, trace_id, _, flags = parsed.split("-")
    return f"00-{trace_id}-{random_hex(16)}-{flags}"
