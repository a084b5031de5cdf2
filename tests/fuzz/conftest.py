"""One real ``toolgate serve`` on loopback for the fuzzers, with the demo keys. When the
module's fuzzing is done, the gateway's log must hold no traceback: an exception the gateway
caught and turned into a clean answer is still a bug the fuzzer found."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.testing import gateway, make_project
from tests.helpers import starts_processes


@pytest.fixture(scope="module")
@starts_processes
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz")
    config = make_project(root, f"sqlite:///{root}/toolgate.db")
    with gateway(config) as url:
        yield url
    for log in sorted(root.glob("gateway-*.log")):
        text = log.read_text("utf-8", "replace")
        assert "Traceback" not in text, f"{log}:\n{text[-4000:]}"
