"""State guards: ``expected_state`` compared with the real state, read by each guard's probe.

Checked only once the policy has allowed the call (stage ``policy``: reading state for a
caller the policy would refuse would leak it), and again once the locks are held (stage
``lock``): a compare-and-swap guard is only atomic inside the same critical section as the
write.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.declarations.templates import TemplateError, _text
from gateway.errors import ValidationError
from gateway.pipeline.context import adapter_call, adapter_of
from gateway.pipeline.records import NO_LOCKS, Call
from gateway.pipeline.services import Services


async def check_state_guards(
    services: Services, call: Call, fencing: Mapping[str, int] = NO_LOCKS
) -> None:
    """Compare every ``expected_state`` key with the real state read by its probe."""
    expected = call.ticket.request.expected_state
    if not expected:
        return
    guards = {g.expected: g for g in call.tool.state_guards}
    unknown = sorted(set(expected) - set(guards))
    if unknown:
        known = ", ".join(sorted(guards)) or "none"
        raise ValidationError(
            f"expected_state has keys {unknown} that {call.tool.ref} cannot check "
            f"(supported: {known})",
            code="unknown_state_key",
        )
    adapter_input = adapter_call(services, call, fencing)
    adapter = adapter_of(services, call)
    for key, want in sorted(expected.items()):
        guard = guards[key]
        try:
            params = {k: t.render(adapter_input.context) for k, t in guard.params.items()}
        except TemplateError as exc:
            raise ValidationError(f"state guard {key}: {exc}", code="state_guard_error") from exc
        actual = await adapter.probe(guard.actual, params, adapter_input)
        if _text(actual) != _text(want):
            raise ValidationError(
                f"expected_state.{key} does not match: expected {_text(want) or 'absent'}, "
                f"found {_text(actual) or 'absent'}; re-read the state and retry",
                code="state_mismatch",
                details={"expected": want, "actual": actual},
            )
