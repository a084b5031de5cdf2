"""The JSON texts the gateway writes, each kind with one encoder made once.

``json.dumps`` with any option builds a new ``JSONEncoder`` per call (about a microsecond), and
a call writes several texts (its request, its result, each event, two hashes). The encoders
keep no state between calls, so one instance serves every thread.
"""

from __future__ import annotations

import json

compact = json.JSONEncoder(separators=(",", ":")).encode
"""``json.dumps(value, separators=(",", ":"))``: JSON or TypeError."""

stored = json.JSONEncoder(separators=(",", ":"), default=str).encode
"""What the store keeps of results and event data: compact, and anything that is not JSON
written as its ``str`` (an adapter's date, say) rather than lost."""

canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode
"""The one canonical form hashed (sorted keys, no spaces, non-ASCII kept as is)."""

strict = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
"""Compact, and refusing NaN and Infinity (ValueError): what a policy engine is given."""

response = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
"""What Starlette's ``JSONResponse.render`` writes, before encoding to UTF-8."""
