"""What a notification says (``gateway/notifications/payload.py``): a template is checked when
the gateway starts, its values cannot break the JSON it fills, and the arguments' summary is
bounded and masked."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from gateway.notifications.payload import MAX_ARGUMENTS, Notifier, check_template
from gateway.settings import Settings
from tests.store.test_store import pending_approval

CHAT = "https://chat.example.com/hook"


def test_a_template_is_refused_at_start_with_the_fault_named() -> None:
    where = "notifications.endpoints[0].template"
    assert check_template(where, '{"text": "$tool for $requester at $page_url"}') is None
    unknown = check_template(where, '{"text": "$tool by $author"}')
    assert unknown is not None and unknown.startswith(where) and "$author" in unknown
    assert "not JSON" in (check_template(where, '{"text": $tool}') or "")
    assert "$$" in (check_template(where, '{"text": "costs $5"}') or "")


def test_values_are_escaped_into_the_template_and_arguments_bounded_and_masked() -> None:
    settings = Settings(
        base_dir=Path("."),
        policy_input_mask=("arguments.password",),
        decision_log={"mask": ["/input/arguments/token"]},
        notifications={
            "endpoints": [
                {"url": CHAT, "secret_env": "WH", "template": '{"text": "$reasons: $arguments"}'},
                {"url": "https://hooks.example.com/x", "secret_env": "WH"},
            ]
        },
    )
    approval = replace(
        pending_approval("ap_1"),
        reasons=('it says "rm -rf"\nand \\ more',),
        arguments={"password": "hunter2hunter2", "token": "t0k3n-t0k3n", "path": "a.txt"},
    )
    chat, hook = Notifier(settings)("approval.requested", approval)
    text = json.loads(chat.body)["text"]
    assert text.startswith('it says "rm -rf"\nand \\ more: ')
    assert json.loads(text.partition(": ")[2]) == {
        "password": "***",
        "token": "***",
        "path": "a.txt",
    }
    data = json.loads(hook.body)["data"]
    assert data["arguments"] == {"password": "***", "token": "***", "path": "a.txt"}
    assert data["page_url"] == "http://127.0.0.1:8080/ui/approvals/ap_1"
    assert chat.id != hook.id and chat.id.startswith("msg_")

    big = replace(approval, arguments={f"k{i}": "x" * 1000 for i in range(10)})
    (_, hook) = Notifier(settings)("approval.requested", big)
    summary = json.loads(hook.body)["data"]["arguments"]
    assert list(summary) == ["…"] and len(json.dumps(summary)) < MAX_ARGUMENTS
