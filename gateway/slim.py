"""What the gateway keeps out of its process: httpx's command-line client.

``import httpx`` runs ``from ._main import main`` (httpx 0.28, ``httpx/__init__.py``), which
imports ``click``, ``rich`` and ``pygments`` whenever they are installed (``rich`` is, for
the CLI's progress bars): about 70 modules and 4 MiB of a gateway's memory
(docs/performance.md#memory), for the ``httpx`` command no gateway runs. httpx already
falls back to a stub ``main`` when ``_main`` cannot be imported; a ``None`` in
``sys.modules`` makes that import fail (the import system's documented behaviour). It is
done only where httpx was not imported yet, and pinned to the httpx it was written for
(``tests/test_slim.py``).

This is the one module that knows the name ``httpx._main``; ``gateway/__init__.py`` runs it
before anything imports httpx.
"""

from __future__ import annotations

import sys

HTTPX_CLI = "httpx._main"


def keep_out_httpx_cli() -> bool:
    """Keep httpx's CLI module out of this process; False if httpx is imported already (the
    host chose, e.g. a test runner or an application embedding the client kit)."""
    if "httpx" in sys.modules:
        return False
    sys.modules.setdefault(HTTPX_CLI, None)  # type: ignore[arg-type]
    return sys.modules[HTTPX_CLI] is None
