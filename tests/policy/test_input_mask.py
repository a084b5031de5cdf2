"""policy_input_mask: the policy.decided event records configured input paths as "***"."""

from __future__ import annotations

from gateway.policy.inputs import MASK, recorded_input
from tests.policy.helpers import BASE_INPUT, make_input


def test_masked_paths_are_recorded_as_the_mask_and_the_document_is_untouched() -> None:
    document = make_input(arguments={"path": "a", "password": "hunter2"})
    recorded, cut = recorded_input(document, ("arguments.password", "paths.relative", "no.such"))
    assert recorded["arguments"] == {"path": "a", "content": "hi", "password": MASK}
    assert recorded["paths"] == [{**BASE_INPUT["paths"][0], "relative": MASK}]
    assert "no" not in recorded and not cut
    assert document["arguments"]["password"] == "hunter2"  # only the record is masked
    assert document["paths"][0]["relative"] == "notes/a.txt"


def test_no_mask_records_everything() -> None:
    assert recorded_input(BASE_INPUT)[0] == BASE_INPUT
