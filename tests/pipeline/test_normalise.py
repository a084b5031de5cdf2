"""Stage normalise (gateway/pipeline/normalise.py): workspace, confined paths, schema
defaults and the hash approvals bind to."""

from __future__ import annotations

import pytest

from gateway.errors import ValidationError
from gateway.pipeline.records import sha256_json
from gateway.pipeline.services import Services
from tests.pipeline.fakes import prepared, request

pytestmark = pytest.mark.anyio


async def test_two_spellings_of_one_call_are_the_same_call(services: Services) -> None:
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
    services: Services, change: dict[str, object], code: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        await prepared(services, request(**change))
    assert caught.value.code == code
