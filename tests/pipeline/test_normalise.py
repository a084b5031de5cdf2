"""Stage normalise (gateway/pipeline/normalise.py): workspace, confined paths, schema
defaults and the hash approvals bind to."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.declarations.catalogue import Catalogue
from gateway.errors import ValidationError
from gateway.pipeline.records import sha256_json
from gateway.store.store import Store
from tests.pipeline.fakes import (
    FunctionAdapter,
    FunctionPolicy,
    allow_all,
    make_services,
    ok,
    prepared,
    request,
)

pytestmark = pytest.mark.anyio


async def test_two_spellings_of_one_call_are_the_same_call(
    tmp_path: Path, store: Store, catalogue: Catalogue
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    one = (await prepared(services, request(arguments={"path": "./a.txt", "content": "hi"}))).call
    two = (await prepared(services, request(arguments={"path": "a.txt", "content": "hi"}))).call
    assert dict(one.arguments) == {"path": "a.txt", "content": "hi", "create_dirs": True}
    assert one.arguments_sha256 == two.arguments_sha256 == sha256_json(one.arguments)
    assert one.paths["path"].relative == "a.txt" and one.roles == ("agent",)
    assert one.workspace.id == "demo"


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"workspace_id": "nowhere"}, "unknown_workspace"),
        ({"workspace_root": "/elsewhere"}, "workspace_root_mismatch"),
        ({"arguments": {"path": "a.txt"}}, "invalid_arguments"),
    ],
)
async def test_what_normalise_refuses(
    tmp_path: Path, store: Store, catalogue: Catalogue, change: dict[str, object], code: str
) -> None:
    services = make_services(
        tmp_path, store, catalogue, FunctionAdapter(ok), FunctionPolicy(allow_all)
    )
    with pytest.raises(ValidationError) as caught:
        await prepared(services, request(**change))
    assert caught.value.code == code
