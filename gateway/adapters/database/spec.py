"""What ``adapter: database`` declarations may say (the keys:
``gateway.adapters.database.options``), and the ``AdapterSpec`` the loader checks a
declaration against. Light on purpose: no engine, no adapter (SQLAlchemy is imported when
a declaration's SQL is first parsed).
"""

from __future__ import annotations

from gateway.adapters.database.options import DatabaseOptions
from gateway.declarations.spec import AdapterSpec

SPEC = AdapterSpec(
    name="database",
    operations={"query": frozenset({"none", "read"}), "execute": frozenset({"write"})},
    probes={"row_version": frozenset(), "query": frozenset({"query"})},
    options=DatabaseOptions,
    stand_ins={"sql": "SELECT 1"},  # a read with no bind: adds no fault of its own
    referenced=frozenset({"binds", "queries", "row_version"}),
)
