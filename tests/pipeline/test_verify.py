"""Stage verify (gateway/pipeline/verify.py): the read-after-write of a side effect."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.pipeline.runner import run_call
from gateway.store.store import Store
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    prepared,
    request,
    sha_probe,
)

pytestmark = pytest.mark.anyio


async def test_verification_mismatch_is_not_succeeded(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path,
        store,
        catalogue,
        FunctionAdapter(ok, sha_probe("not-the-hash")),
        FunctionPolicy(allow_all),
    )
    result = (await run_call(services, request())).result
    assert result is not None and result["outcome"] == "failed"
    assert result["error"]["phase"] == "verify"
    probes = [e for e in result["evidence"] if e["kind"] == "probe"]
    assert probes[0]["passed"] is False


async def test_verify_leaves_a_call_the_adapter_did_not_answer_alone(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    from gateway.errors import PolicyDenied
    from gateway.pipeline import verify
    from gateway.pipeline.outcomes import failed

    adapter = FunctionAdapter(ok, sha_probe("never read"))
    services = make_services(tmp_path, store, catalogue, adapter, FunctionPolicy(allow_all))
    state = await prepared(services, request())
    refused = failed(state, PolicyDenied("no"))
    assert await verify.run(services, refused) is refused


def _with_output(catalogue: Catalogue, output: dict[str, object]) -> Catalogue:
    """The shipped catalogue with ``output`` declared on fs.write_file 1.2.0."""
    tools = [
        t.model_copy(update={"output": output}) if t.ref == "fs.write_file@1.2.0" else t
        for t in catalogue.all()
    ]
    return Catalogue(tools)


HI_SHA = hashlib.sha256(b"hi").hexdigest()


async def test_data_that_matches_the_declared_output_succeeds(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    declared = _with_output(catalogue, {"ok": {"type": "boolean", "required": True}})
    adapter = FunctionAdapter(ok, sha_probe(HI_SHA))
    services = make_services(tmp_path, store, declared, adapter, FunctionPolicy(allow_all))
    result = (await run_call(services, request())).result
    assert result is not None and result["outcome"] == "succeeded", result
    assert result["data"] == {"ok": True}


async def test_data_that_breaks_the_declared_output_fails_in_verify_and_keeps_everything(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    declared = _with_output(catalogue, {"path": {"type": "string", "required": True}})
    adapter = FunctionAdapter(ok, sha_probe(HI_SHA))
    services = make_services(tmp_path, store, declared, adapter, FunctionPolicy(allow_all))
    record = await run_call(services, request())
    result = record.result
    assert result is not None and result["outcome"] == "failed", result
    error = result["error"]
    assert (error["type"], error["phase"], error["retryable"]) == (
        "output_mismatch",
        "verify",
        False,
    )
    assert error["errors"] == {"ok": ["unknown field"], "path": ["required field"]}, error
    assert "declared output" in error["message"]
    # the side effect happened: the adapter's report, its data and the evidence are kept
    assert result["data"] == {"ok": True}
    assert result["side_effect"]["committed"] is True
    assert any(e["kind"] == "probe" and e["passed"] for e in result["evidence"])
    kinds = [e.type for e in await store.events(record.id)]
    assert "tool.completed" in kinds


async def test_a_failed_verify_probe_is_not_hidden_by_the_output_check(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    declared = _with_output(catalogue, {"path": {"type": "string", "required": True}})
    adapter = FunctionAdapter(ok, sha_probe("not-the-hash"))
    services = make_services(tmp_path, store, declared, adapter, FunctionPolicy(allow_all))
    result = (await run_call(services, request())).result
    assert result is not None and result["error"]["type"] == "verification_failed"
