"""The in-process micro-benchmarks: the policy decision (cached and on a miss), validation
+ normalisation of each shipped tool, the whole pipeline without HTTP (sequential, 16 at a
time, stage by stage; with and without the audit trail's hash chain), the store's
transactions, and cProfile of the pipeline."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from pathlib import Path
from typing import Any

from gateway.pipeline import normalise, resolve, validate
from gateway.pipeline.policy import policy_input
from gateway.pipeline.records import Requested
from gateway.pipeline.request import parse_request
from gateway.pipeline.runner import run_call
from gateway.policy.embedded import EmbeddedPolicy
from gateway.runtime.bootstrap import close_runtime, open_runtime
from gateway.settings import load_settings
from gateway.testing import make_project

from .audit import chain_cost
from .plan import KIB, Plan, body, log, seed_workspace, sqlite_url
from .profiling import cprofile_pipeline
from .servers import pg_available, pg_database
from .stages import stage_breakdown
from .store import store_micro
from .timing import stats_us, timed_async, timed_loop

VALID_ARGUMENTS: dict[str, dict[str, Any]] = {
    "db.mark_shipped": {"order_id": 1, "carrier": "dhl", "tracking": "JD0001-42"},
    "db.query_orders": {"status": "paid", "limit": 10},
    "fs.append_file": {"path": "notes/a.txt", "content": KIB},
    "fs.apply_patch": {"path": "a.txt", "patch": "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-a\n+b\n"},
    "fs.delete_file": {"path": "notes/a.txt"},
    "fs.list_dir": {"path": "notes", "recursive": True},
    "fs.read_file": {"path": "one-kib.txt"},
    "fs.write_file": {"path": "notes/a.txt", "content": KIB},
    "fs.write_files": {"files": [{"path": f"notes/{i}.txt", "content": KIB} for i in range(3)]},
    "http.get_json": {"path": "/items/1"},
    "orders.create": {"item_id": 1, "quantity": 2, "note": "bench"},
    "orders.get": {"order_id": "ord_1"},
    "proc.python": {"script": "tools/s.py", "args": ["a", "b"], "stdin": ""},
    "proc.run_tests": {"target": "tests", "keyword": "smoke"},
    "web.extract_text": {"url": "https://example.com/", "selector": "h1"},
    "web.screenshot": {"url": "https://example.com/"},
    "web.submit_form": {
        "url": "https://example.com/form",
        "name": "Ada",
        "email": "a@b.c",
        "plan": "pro",
    },
}


def _generated_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    """A guess at valid arguments for a tool this file does not know (required keys only)."""
    samples = {"string": "a", "integer": 1, "number": 1.0, "boolean": True, "list": [], "dict": {}}
    out: dict[str, Any] = {}
    for key, rule in schema.items():
        if isinstance(rule, dict) and rule.get("required"):
            if "allowed" in rule:
                out[key] = rule["allowed"][0]
            else:
                kind = rule.get("type")
                out[key] = samples.get(kind[0] if isinstance(kind, list) else kind, "a")
    return out


def request_for(payload: dict[str, Any]) -> Any:
    return parse_request(payload, "alice")


async def micro_phase(
    plan: Plan, work: Path, results: dict[str, Any], profile_out: Path | None
) -> None:
    n = plan.iterations
    micro = results["micro"]
    root = work / "micro"
    config = make_project(root, sqlite_url(root))
    seed_workspace(config)
    services = await open_runtime(load_settings(config, env={}))
    try:
        # The policy input documents, built by the real stages 1-3.
        async def document(payload: dict[str, Any]) -> dict[str, Any]:
            resolved = await resolve.run(services, Requested.start(request_for(payload)))
            prepared = await validate.run(services, await normalise.run(services, resolved))
            return policy_input(prepared.call)

        policy = services.policy
        assert isinstance(policy, EmbeddedPolicy)
        for name, payload, want in (
            ("allow", body("fs.read_file", {"path": "one-kib.txt"}, "p1"), "allow"),
            ("deny", body("fs.write_file", {"path": ".git/config", "content": "x"}, "p2"), "deny"),
        ):
            doc = await document(payload)
            decision = policy.decide_sync(doc)
            assert decision.result.value == want, decision
            micro[f"policy_decision_{name}"] = stats_us(
                timed_loop(lambda d=doc: policy.decide_sync(d), n)
            )
        # The embedded backend caches decisions by the part of the input the policy reads
        # (docs/policies.md), so the loops above are cache hits, as repeated calls on the same
        # paths are. A miss: a different path in every call.
        for name, payload in (
            ("allow", body("fs.read_file", {"path": "one-kib.txt"}, "p3")),
            ("deny", body("fs.write_file", {"path": ".git/config", "content": "x"}, "p4")),
        ):
            doc = await document(payload)
            misses = []
            for i in range(n + 50):
                other = copy.deepcopy(doc)
                for entry in other["paths"]:
                    entry["relative"] = f"{entry['relative']}.{i}"
                misses.append(other)
            docs = iter(misses)
            micro[f"policy_decision_{name}_miss"] = stats_us(
                timed_loop(lambda d=docs: policy.decide_sync(next(d)), n)
            )
        log(
            f"policy decision: {micro['policy_decision_allow']['median_us']} µs median "
            f"(cached), {micro['policy_decision_allow_miss']['median_us']} µs (miss)"
        )

        # Validation + normalisation of each shipped tool (what stage 2 does with cerberus).
        validation: dict[str, Any] = {}
        for tool in services.catalogue.all():
            validator = services.catalogue.validator(tool)
            args = VALID_ARGUMENTS.get(tool.name) or _generated_arguments(dict(tool.input))
            if not validator.validate(dict(args)):
                validation[tool.ref] = {"error": f"arguments not valid: {validator.errors}"}
                continue

            def once(v: Any = validator, a: dict[str, Any] = args) -> dict[str, Any]:
                if not v.validate(dict(a)):
                    raise AssertionError(v.errors)
                return dict(v.document)

            validation[tool.ref] = stats_us(timed_loop(once, n))
        micro["validation"] = validation
        worst = max(
            (v for v in validation.values() if "median_us" in v), key=lambda v: v["median_us"]
        )
        log(f"validation: worst median {worst['median_us']} µs over {len(validation)} tools")

        # The whole pipeline without HTTP: fs.read_file through run_call, sequentially.
        nonce = uuid.uuid4().hex[:8]
        counter = iter(range(10**9))

        def read_request() -> Any:
            return request_for(
                body("fs.read_file", {"path": "one-kib.txt"}, f"pipe-{nonce}-{next(counter)}")
            )

        record = await run_call(services, read_request())
        assert (record.result or {}).get("outcome") == "succeeded", record.result
        requests = [read_request() for _ in range(n + 20)]
        it = iter(requests)
        micro["pipeline_read"] = stats_us(
            await timed_async(lambda: run_call(services, next(it)), n)
        )
        log(f"pipeline: {micro['pipeline_read']['median_us']} µs median")
        micro["audit_chain"] = await chain_cost(services, read_request, n)
        log(
            f"audit chain: {micro['audit_chain']['chain_cpu_us_per_call']} µs CPU a read call "
            f"({micro['audit_chain']['chain_cpu_share_pct']} %)"
        )
        # ... and 16 at a time: the in-process ceiling that HTTP adds to.
        concurrent = [read_request() for _ in range(min(n, 1000))]
        start = time.perf_counter()
        queue = iter(concurrent)

        async def worker() -> None:
            for req in queue:
                await run_call(services, req)

        await asyncio.gather(*(worker() for _ in range(16)))
        micro["pipeline_read_concurrent16_rps"] = round(
            len(concurrent) / (time.perf_counter() - start), 1
        )
        m = max(n // 4, 10)
        writes = [
            request_for(
                body(
                    "fs.write_file", {"path": f"w/p{i % 64}.txt", "content": KIB}, f"pw-{nonce}-{i}"
                )
            )
            for i in range(m + 20)
        ]
        it = iter(writes)
        micro["pipeline_write"] = stats_us(
            await timed_async(lambda: run_call(services, next(it)), m)
        )

        def write_request(i: int) -> Any:
            payload = body(
                "fs.write_file", {"path": f"w/s{i % 64}.txt", "content": KIB}, f"sw-{nonce}-{i}"
            )
            return request_for(payload)

        micro["pipeline_read_stages"] = await stage_breakdown(services, lambda i: read_request(), m)
        micro["pipeline_write_stages"] = await stage_breakdown(services, write_request, m)
        if profile_out is not None:
            results["profile_inprocess"] = await cprofile_pipeline(
                services, read_request, max(n // 4, 10), profile_out
            )
    finally:
        await close_runtime(services)


async def store_phase(plan: Plan, work: Path, results: dict[str, Any]) -> None:
    """The store's transactions on their own, on SQLite and (when it answers) PostgreSQL."""
    n = plan.iterations
    micro = results["micro"]
    micro["store_sqlite"] = await store_micro(sqlite_url(work / "store-micro"), n)
    ok, why = pg_available()
    if ok:
        with pg_database() as url:
            micro["store_postgres"] = await store_micro(url, n)
    else:
        micro["store_postgres"] = {"skipped": why}
