"""What the fuzzers draw from: JSON of every shape, ids of every type and size, path-like
text, and the shipped tools with their declared argument keys."""

from __future__ import annotations

import yaml
from hypothesis import strategies as st

from gateway.testing import PROJECT


def _argument_keys() -> dict[str, tuple[str, ...]]:
    """Each shipped tool's declared input keys (web.* left out: each call starts Chromium)."""
    keys: dict[str, tuple[str, ...]] = {}
    for path in sorted((PROJECT / "tools.d").glob("*.yaml")):
        declaration = yaml.safe_load(path.read_text())
        if not declaration["name"].startswith("web."):
            keys[declaration["name"]] = tuple(declaration.get("input") or ())
    return keys


ARGUMENT_KEYS = _argument_keys()
TOOLS = tuple(ARGUMENT_KEYS)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
path_like = st.lists(
    st.sampled_from(["..", ".", "", "a", "notes", "\\", "é", "\x00", "~", "/", "%2e%2e"]),
    max_size=6,
).map("/".join)
ids = (
    st.integers(min_value=-(2**200), max_value=2**200)
    | st.sampled_from([0, -1, 2**53, 2**63, 2**64, 10**400])
    | st.text(max_size=300)
    | st.floats(allow_nan=False, allow_infinity=False)
    | json_values
)
argument_values = json_values | path_like
"""An argument's value: any JSON, or text shaped like a path (``..``, NUL, ``\\``, unicode)."""
