"""What a notification says: the page of the approval and a summary of the call, never a
secret; as the gateway's own JSON, or through an endpoint's ``template`` (Slack, Teams).

The arguments are summarised as the ``policy.decided`` event records them
(``gateway.policy.inputs.recorded_input``: long values cut, ``policy_input_mask`` paths and the
decision log's ``mask`` as ``***``), cut to ``MAX_ARGUMENTS`` characters, and every secret an
adapter has read is masked in the whole body (``gateway.observability.logs``).
"""

from __future__ import annotations

import json
import string
import time
from collections.abc import Sequence
from typing import Any

from gateway.ids import sortable_id
from gateway.observability.logs import SECRETS
from gateway.policy.inputs import recorded_input
from gateway.settings import NotificationEndpoint, Settings
from gateway.store.outbox import Notice
from gateway.store.records import ApprovalRecord

MAX_ARGUMENTS = 4096
"""Characters of the arguments' summary (compact JSON) a notification carries at most."""
FIELDS = (
    "event",
    "approval_id",
    "execution_id",
    "status",
    "page_url",
    "tool",
    "version",
    "requester",
    "workspace",
    "reasons",
    "arguments",
    "expires_at",
    "decided_by",
    "comment",
)
"""The ``$names`` a template may use (docs/operations.md#approval-notifications)."""


class Notifier:
    """Makes the notifications of an approval event (``gateway.store.outbox.Notices``)."""

    def __init__(self, settings: Settings) -> None:
        self.endpoints = settings.notifications.endpoints
        self.base_url = settings.page_base_url
        masks = [p for p in settings.policy_input_mask if p.startswith("arguments.")]
        masks += [
            ".".join(p.strip("/").split("/")[1:])
            for p in settings.decision_log.mask
            if p.strip("/").split("/")[1:2] == ["arguments"]
        ]
        self.masks = tuple(dict.fromkeys(masks))
        self.templates = {e.url: string.Template(e.template) for e in self.endpoints if e.template}

    def __call__(self, event: str, approval: ApprovalRecord) -> Sequence[Notice]:
        wanted = [e for e in self.endpoints if event in e.events]
        if not wanted:
            return ()
        data = self.data(approval)
        notices = []
        for endpoint in wanted:
            body = self.body(endpoint, event, data)
            msg_id = sortable_id("msg")
            notices.append(Notice(msg_id, endpoint.url, event, approval.id, body))
        return notices

    def data(self, approval: ApprovalRecord) -> dict[str, Any]:
        """What every notification of ``approval`` carries, as it stands now."""
        return {
            "approval_id": approval.id,
            "execution_id": approval.execution_id,
            "status": approval.status,
            "page_url": f"{self.base_url}/ui/approvals/{approval.id}",
            "tool": {"name": approval.tool_name, "version": approval.tool_version},
            "requested_by": approval.principal,
            "workspace": approval.workspace_id,
            "reasons": list(approval.reasons),
            "arguments": self.arguments(approval.arguments),
            "arguments_sha256": approval.arguments_sha256,
            "requested_at": _rfc3339(approval.requested_ms),
            "expires_at": _rfc3339(approval.expires_ms),
            "decided_by": approval.decided_by,
            "decided_at": _rfc3339(approval.decided_ms) if approval.decided_ms else None,
            "comment": approval.comment,
        }

    def arguments(self, arguments: dict[str, Any]) -> Any:
        """The arguments bounded and masked as the recorded policy input keeps them, cut
        whole past ``MAX_ARGUMENTS`` characters."""
        shown = recorded_input({"arguments": arguments}, self.masks)[0]["arguments"]
        size = len(json.dumps(shown, separators=(",", ":"), default=str))
        if size > MAX_ARGUMENTS:
            return {"…": f"[cut: {size} characters; the page shows them]"}
        return shown

    def body(self, endpoint: NotificationEndpoint, event: str, data: dict[str, Any]) -> str:
        """The exact text sent to ``endpoint`` (secrets adapters read masked in it)."""
        template = self.templates.get(endpoint.url)
        if template is None:
            envelope = {"type": event, "timestamp": _rfc3339(int(time.time() * 1000))}
            text = json.dumps({**envelope, "data": data}, separators=(",", ":"), default=str)
        else:
            text = template.substitute(template_values(event, data))
        return SECRETS.mask(text)


def template_values(event: str, data: dict[str, Any]) -> dict[str, str]:
    """Each ``$name`` of a template, escaped for a JSON string (the template puts it
    between quotes)."""
    values = {
        "event": event,
        "approval_id": data["approval_id"],
        "execution_id": data["execution_id"],
        "status": data["status"],
        "page_url": data["page_url"],
        "tool": data["tool"]["name"],
        "version": data["tool"]["version"],
        "requester": data["requested_by"],
        "workspace": data["workspace"],
        "reasons": "; ".join(data["reasons"]),
        "arguments": json.dumps(data["arguments"], separators=(",", ":"), default=str),
        "expires_at": data["expires_at"],
        "decided_by": data["decided_by"] or "",
        "comment": data["comment"] or "",
    }
    return {name: json.dumps(str(value))[1:-1] for name, value in values.items()}


def check_template(where: str, template: str) -> str | None:
    """Why ``template`` cannot be an endpoint's body (a ``$name`` it does not know, or not
    JSON once filled in), or None."""
    sample = {name: f'sample {name} " \\ \n' for name in FIELDS}
    escaped = {name: json.dumps(value)[1:-1] for name, value in sample.items()}
    try:
        text = string.Template(template).substitute(escaped)
    except KeyError as exc:
        return f"{where}: unknown placeholder ${exc.args[0]} (known: {', '.join(FIELDS)})"
    except ValueError as exc:
        return f"{where}: {exc} (write $$ for a dollar sign)"
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{where}: not JSON once its placeholders are filled in ({exc})"
    return None


def _rfc3339(ms: int) -> str:
    seconds, rest = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest:03d}Z"
