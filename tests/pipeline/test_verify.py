"""Stage verify (gateway/pipeline/verify.py): the read-after-write of a side effect."""

from __future__ import annotations

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
