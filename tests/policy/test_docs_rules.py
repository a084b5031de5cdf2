"""The rule patterns of docs/policies.md, run as written: each fenced block whose first line is
``# rego/<file>`` or ``# policies/<file>`` is that file of a copy of the shipped project."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import load_policy_sources
from gateway.policy.testing import run_tests
from tests.policy.helpers import REPO, make_input
from tests.policy.test_extension import project_copy

BLOCK = re.compile(r"^```(?:rego|yaml)\n# ((?:rego|policies)/[\w.]+)\n(.*?)^```$", re.M | re.S)


def doc_files() -> dict[str, str]:
    text = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    return {name: body for name, body in BLOCK.findall(text)}


def test_the_business_hours_pattern_passes_its_tests_and_keeps_the_cache(tmp_path: Path) -> None:
    files = doc_files()
    assert set(files) == {
        "policies/business_hours.yaml",
        "rego/business_hours.rego",
        "rego/business_hours_test.rego",
    }
    root = project_copy(tmp_path, {})
    for name, body in files.items():
        (root / name).write_text(body, encoding="utf-8")
    sources = load_policy_sources(root / "rego", root / "policies")
    assert sources.warnings == ()
    results = run_tests(sources, "business_hours").results
    assert [r.message for r in results if not r.passed] == []
    assert len(results) == 5

    backend = EmbeddedPolicy(sources)
    try:
        assert backend.cache_refusal is None  # time.clock and time.weekday of a given time
        assert backend._tree is not None and backend._tree["request"] == {"time_ms": None}

        def at(time_ms: int) -> str:
            doc = make_input(request={"time_ms": time_ms})
            return backend.decide_sync(doc).result.value

        assert at(1764579600000) == "allow"  # Monday 10:00 Paris
        assert at(1764615600000) == "deny"  # Monday 20:00
        assert at(1764579600000) == "allow"
    finally:
        asyncio.run(backend.aclose())


def test_a_policy_that_never_reads_the_time_keeps_one_cache_entry() -> None:
    backend = EmbeddedPolicy(load_policy_sources(REPO / "rego", REPO / "policies"))
    try:
        for time_ms in (1, 2, 3):
            assert backend.decide_sync(make_input(request={"time_ms": time_ms})).result.value == (
                "allow"
            )
        assert backend._cache is not None and len(backend._cache) == 1
    finally:
        asyncio.run(backend.aclose())
