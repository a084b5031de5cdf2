"""Stage normalise (gateway/pipeline/normalise.py): workspace, confined paths, schema
defaults and the hash approvals bind to."""

from __future__ import annotations

import json

import pytest

from gateway import jsonlimits
from gateway.declarations.validator import MAX_ERRORS
from gateway.errors import ValidationError
from gateway.pipeline.records import ToolExecutionRequest, sha256_json
from gateway.pipeline.request import parse_request
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


def _deep(levels: int) -> dict[str, object]:
    value: dict[str, object] = {"x": 1}
    for _ in range(levels):
        value = {"x": value}
    return value


def _checked_request(services: Services, arguments: dict[str, object]) -> ToolExecutionRequest:
    """A request as the REST door makes it: its body parsed, checked and measured."""
    body = {
        "run_id": "r",
        "call_id": "c1",
        "tool": {"name": "fs.write_file"},
        "arguments": arguments,
        "workspace": {"id": "demo"},
    }
    checked = jsonlimits.decode_checked(json.dumps(body).encode(), services.settings.json_limits)
    return parse_request(checked.value, "alice", body_bound=checked.bound)


async def test_arguments_the_door_checked_are_not_walked_again(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    req = _checked_request(services, {"path": "a.txt", "content": "hi"})
    walked: list[object] = []
    real = jsonlimits.check
    monkeypatch.setattr(jsonlimits, "check", lambda *a, **k: walked.append(a) or real(*a, **k))
    await prepared(services, req)
    assert walked == []
    await prepared(services, req.with_arguments({"path": "a.txt", "content": "hi"}))
    assert len(walked) == 1  # other arguments than the door checked: walked here


async def test_arguments_not_the_ones_the_door_checked_are_bounded(services: Services) -> None:
    req = _checked_request(services, {"path": "a.txt", "content": "hi"})
    too_deep = {"path": "a.txt", "content": "hi", "extra": _deep(40)}
    for changed in (
        req.with_arguments(too_deep),  # e.g. edited before approval
        ToolExecutionRequest.from_json({**req.to_json(), "arguments": too_deep}),  # rebuilt
    ):
        with pytest.raises(ValidationError) as caught:
            await prepared(services, changed)
        assert caught.value.code == "invalid_arguments"
        assert caught.value.details["limit"] == "json_too_deep"


async def test_the_bound_a_door_checked_is_a_field_other_arguments_drop(services: Services) -> None:
    req = _checked_request(services, {"path": "a.txt", "content": "hi"})
    assert req.arguments_bound is not None
    assert req.arguments_bound.limits == services.settings.json_limits
    assert req.with_arguments({"path": "b.txt"}).arguments_bound is None
    assert ToolExecutionRequest.from_json(req.to_json()).arguments_bound is None


async def test_invalid_arguments_name_every_field_at_fault(services: Services) -> None:
    # an unknown field hid the others: only "bogus" was named
    arguments = {"path": 5, "content": "x", "bogus": 1}
    with pytest.raises(ValidationError) as caught:
        await prepared(services, request(arguments=arguments))
    assert set(caught.value.details["errors"]) == {"path", "bogus"}


async def test_thousands_of_unknown_fields_are_reported_within_the_error_budget(
    services: Services,
) -> None:
    # as many as max_json_values lets through (10,000 arguments would be refused before)
    arguments = {"path": 5, "content": "x", **{f"u{i}": i for i in range(9_990)}}
    with pytest.raises(ValidationError) as caught:
        await prepared(services, request(arguments=arguments))
    details = caught.value.details
    assert (len(details["errors"]), details["errors_truncated"]) == (MAX_ERRORS, True)


async def test_an_empty_path_meets_the_schema_s_empty_false(services: Services) -> None:
    # "" was confined to the workspace root, ".", before the schema saw it, so a tool's
    # `empty: false` never fired and fs.write_file went on to write to the root
    with pytest.raises(ValidationError) as caught:
        await prepared(services, request(arguments={"path": "", "content": "x"}))
    assert (caught.value.code, caught.value.details["errors"]) == (
        "invalid_arguments",
        {"path": ["empty values not allowed"]},
    )
