"""The page's sessions as the store keeps them: a sign-out ends every copy of a session on
every replica (docs/operations.md#the-approvals-page)."""

from __future__ import annotations

from gateway.runtime.container import Runtime


async def ended(services: Runtime, session_id: str) -> bool:
    """Whether the session was signed out (``StoreError`` when the store cannot say)."""
    return await services.store.session_ended(session_id)


async def end(services: Runtime, session_id: str, expires_ms: int) -> None:
    """Sign the session out, for as long as its cookie could still be presented."""
    await services.store.end_session(session_id, expires_ms)
