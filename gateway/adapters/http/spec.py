"""What ``adapter: http`` declarations may say (the keys: ``gateway.adapters.http.options``),
and the ``AdapterSpec`` the loader checks a declaration against. Light on purpose: no
HTTP client, no adapter.
"""

from __future__ import annotations

from gateway.adapters.http.options import HttpOptions
from gateway.declarations.spec import AdapterSpec

SPEC = AdapterSpec(
    name="http",
    operations={"request": frozenset({"none", "read", "write", "external"})},
    probes={"http_get": frozenset({"url"})},
    options=HttpOptions,
)
