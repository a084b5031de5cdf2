"""One backend used from several threads at once: each thread gets its own engine."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gateway.policy import embedded
from gateway.policy.embedded import EmbeddedPolicy
from gateway.policy.loader import PolicySources
from gateway.types import DecisionResult
from tests.policy.helpers import make_input

DELETE = {"name": "fs.delete_file"}
CASES: list[tuple[dict[str, Any], DecisionResult]] = [
    (make_input(), DecisionResult.ALLOW),
    (make_input(tool=DELETE), DecisionResult.REQUIRE_APPROVAL),
    (
        make_input(tool=DELETE, approval={"present": True, "approved_by": "bob"}),
        DecisionResult.ALLOW,
    ),
    (make_input(actor={"user_id": "mallory"}), DecisionResult.DENY),
    (make_input(workspace={"id": "ops"}), DecisionResult.DENY),
    (
        make_input(paths=[{"argument": "path", "relative": ".git/HEAD", "inside_workspace": True}]),
        DecisionResult.DENY,
    ),
]
THREADS = 4


def test_four_threads_decide_correctly_at_once(shipped: PolicySources) -> None:
    backend = EmbeddedPolicy(shipped)
    jobs = [CASES[i % len(CASES)] for i in range(60 * THREADS)]
    start = threading.Barrier(THREADS, timeout=60)  # the timeout only guards against a hang

    def work(chunk: list[tuple[dict[str, Any], DecisionResult]]) -> tuple[int, list[str]]:
        start.wait()
        wrong = [
            f"{doc['actor']['user_id']}/{doc['tool']['name']}: {got.result} != {want}"
            for doc, want in chunk
            if (got := backend.decide_sync(doc)).result is not want
        ]
        return threading.get_ident(), wrong

    with ThreadPoolExecutor(THREADS) as pool:
        outcomes = list(pool.map(work, [jobs[i::THREADS] for i in range(THREADS)]))
    assert len({ident for ident, _ in outcomes}) == THREADS
    assert [w for _, wrong in outcomes for w in wrong] == []
    asyncio.run(backend.aclose())


def test_close_drops_engines_on_their_own_threads(shipped: PolicySources) -> None:
    backend = EmbeddedPolicy(shipped)
    token = backend._token

    def engines_here() -> bool:
        return token in embedded._thread_engines()

    with ThreadPoolExecutor(1) as pool:
        assert (
            pool.submit(backend.decide_sync, make_input()).result().result is DecisionResult.ALLOW
        )
        assert pool.submit(engines_here).result()
        asyncio.run(backend.aclose())
        after = pool.submit(backend.decide_sync, make_input()).result()
        assert after.reasons == ("policy error: the policy backend is closed",)
        assert not pool.submit(engines_here).result()
    assert not engines_here()


def test_each_backend_has_its_own_engine(shipped: PolicySources) -> None:
    first, second = EmbeddedPolicy(shipped), EmbeddedPolicy(shipped)
    engines = embedded._thread_engines()
    assert engines[first._token] is not engines[second._token]
    asyncio.run(first.aclose())
    assert first._token not in embedded._thread_engines()
    assert second.decide_sync(make_input()).result is DecisionResult.ALLOW
    asyncio.run(second.aclose())
