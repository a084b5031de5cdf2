"""The JSON texts the gateway writes, each kind with one encoder made once.

``json.dumps`` with any option builds a new ``JSONEncoder`` per call (about a microsecond), and
a call writes several texts (its request, its result, each event, two hashes). More: even a
made-once ``JSONEncoder(...).encode`` builds a new C encoder for each text it writes (about
as much work as writing a small event's data), so each kind's C encoder is made once here
(:func:`prebuilt`). They keep no state between calls, so one instance serves every thread.
They keep no record of the containers being written either: a value with a cycle (which no
decoded JSON has) fails as a ``RecursionError``, not ``json``'s ``ValueError``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any


def prebuilt(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode`` with its C encoder made once (``encode`` itself where the C
    accelerator is missing or the encoder indents)."""
    if c_make_encoder is None or encoder.indent is not None:
        return encoder.encode
    make = c_make_encoder(
        None,  # no circular-reference record (see the module)
        encoder.default,
        encode_basestring_ascii if encoder.ensure_ascii else encode_basestring,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    join = "".join

    def encode(value: Any) -> str:
        return join(make(value, 0))

    return encode


compact = prebuilt(json.JSONEncoder(separators=(",", ":")))
"""``json.dumps(value, separators=(",", ":"))``: JSON or TypeError."""

stored = prebuilt(json.JSONEncoder(separators=(",", ":"), default=str))
"""What the store keeps of results and event data: compact, and anything that is not JSON
written as its ``str`` (an adapter's date, say) rather than lost."""

canonical = prebuilt(json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False))
"""The one canonical form hashed (sorted keys, no spaces, non-ASCII kept as is)."""

strict = prebuilt(json.JSONEncoder(allow_nan=False, separators=(",", ":")))
"""Compact, and refusing NaN and Infinity (ValueError): what a policy engine is given."""

response = prebuilt(json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")))
"""What Starlette's ``JSONResponse.render`` writes, before encoding to UTF-8."""

spaced = prebuilt(json.JSONEncoder())
"""``json.dumps(value)``: the default separators, a space after each (a completed call's
fencing tokens)."""
