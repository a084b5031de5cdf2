"""Which adapters exist, and what the declaration loader checks a tool against."""

from __future__ import annotations

from collections.abc import Mapping

from gateway.adapters import file
from gateway.adapters.base import Adapter, AdapterSpec

SPECS: Mapping[str, AdapterSpec] = {file.SPEC.name: file.SPEC}


def build_adapters() -> dict[str, Adapter]:
    """One live instance of every adapter, opened with the app and closed with it."""
    return {"file": file.FileAdapter()}
