"""The page's edit-before-approve form: one field per argument the declaration marks
editable (``approval: {editable: [...]}``), and reading the approver's edits back.

A string argument is edited as text, any other as JSON. A field sent back as it was shown is
no edit, so the form may carry every editable field. Browsers send a textarea's line breaks
as CRLF: text is read back with LF line breaks. Checking the edit is the runtime's
(``runtime/edits.py``), as for the REST door.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import MalformedRequest
from gateway.store.records import ApprovalRecord
from gateway.types import JSON

PREFIX = "edit."
"""Form fields named ``edit.<argument>`` hold the edited arguments."""


@dataclass(frozen=True, slots=True)
class EditField:
    name: str
    text: bool
    """Edited as text (a string argument); else as JSON."""
    shown: str
    """What the field shows: the approval's value (or, after a refusal, what was sent)."""
    original: str
    """The approval's value as the field shows it; sent back unchanged, it is no edit."""


def fields(
    names: Sequence[str],
    schema: Mapping[str, Any],
    approval: ApprovalRecord,
    sent: Mapping[str, str] | None = None,
) -> list[EditField]:
    """The form's fields for the editable ``names`` (``schema``: the tool's input)."""
    out = []
    for name in names:
        rule = schema.get(name)
        value = approval.arguments.get(name)
        text = isinstance(value, str) or (
            value is None and isinstance(rule, dict) and rule.get("type") == "string"
        )
        original = _shown(value, text)
        shown = (sent or {}).get(PREFIX + name, original)
        out.append(EditField(name, text, shown, original))
    return out


def _shown(value: Any, text: bool) -> str:
    if text:
        return "" if value is None else str(value)
    return "" if value is None else json.dumps(value, indent=2, ensure_ascii=False)


def read(form: Mapping[str, str], edit_fields: Sequence[EditField]) -> dict[str, JSON]:
    """The edits a submitted form makes: the fields whose value changed, parsed."""
    edits: dict[str, JSON] = {}
    known = {PREFIX + f.name for f in edit_fields}
    stray = sorted(k for k in form if k.startswith(PREFIX) and k not in known)
    if stray:
        raise MalformedRequest(
            f"these arguments cannot be edited here: {', '.join(k[len(PREFIX) :] for k in stray)}",
            code="invalid_edit",
        )
    for field in edit_fields:
        sent = form.get(PREFIX + field.name)
        if sent is None or _lf(sent) == _lf(field.original):
            continue
        if field.text:
            edits[field.name] = _lf(sent)
            continue
        try:
            edits[field.name] = json.loads(sent)
        except (ValueError, RecursionError) as exc:
            raise MalformedRequest(
                f"{field.name} is edited as JSON, and what was sent is not JSON ({exc})",
                code="invalid_edit",
            ) from exc
    return edits


def _lf(text: str) -> str:
    return text.replace("\r\n", "\n")
