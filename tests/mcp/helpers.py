"""Clients of both MCP eras, and the handle of the test gateway (fixtures: conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from tests.helpers import ALICE, BOB

ERAS = ("legacy", "2026-07-28")
"""The SDK client's ``mode``: the 2025-11-25 handshake, or the stateless 2026-07-28 wire."""


@dataclass(frozen=True)
class Gateway:
    url: str
    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "var" / "workspaces" / "demo"

    def rest(self, key: str = BOB) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        )


@asynccontextmanager
async def connect(
    url: str,
    era: str,
    key: str = ALICE,
    extensions: Sequence[ClientExtension] | None = None,
    elicitation_callback: ElicitationFnT | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Client]:
    """The official SDK client over streamable HTTP with a bearer key and any further
    ``headers`` (with an ``elicitation_callback``, it declares elicitation, form and URL
    mode)."""
    headers = {**(headers or {}), "Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60, read=120)) as http,
        Client(
            streamable_http_client(url + "/mcp", http_client=http),
            mode=era,  # type: ignore[arg-type]
            extensions=extensions,
            elicitation_callback=elicitation_callback,
        ) as client,
    ):
        yield client


def meta_of(result: Any) -> dict[str, Any]:
    return dict(result.meta or {})
