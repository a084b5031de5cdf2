"""URLs as the server's one HTTP client sends them: yarl's ``URL`` (aiohttp's own), parsed
through ``parse_url`` so that every module reads a URL the same way.

yarl percent-encodes what must be encoded and keeps the escapes it is given (an encoded
``/`` in a path stays one), IDNA-encodes the host, and reads the default port of http and
https. It is more lenient than an HTTP client may be about the host, so ``parse_url``
refuses a host holding a character no host name or address has (a space, a quote, ``<``),
as httpx did: such a URL is not sent, whatever an allowlist of ``*`` would say. (An escape,
``%2F``, stays in the host as it came; egress control refuses that host by name.)
"""

from __future__ import annotations

import re

from yarl import URL

__all__ = ["URL", "parse_url"]

_BAD_HOST = re.compile(r"""[\x00-\x20\x7f"#/<>?@\[\\\]^`{|}]""")


def parse_url(text: str) -> URL:
    """``text`` as a URL; ValueError when it is not one (a bad IPv6 literal, a port out of
    range, a host no server could have)."""
    url = URL(text)
    host = url.raw_host
    if host and _BAD_HOST.search(host):
        raise ValueError(f"{host[:100]!r} is not a host name or address")
    return url
