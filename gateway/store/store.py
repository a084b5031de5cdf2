"""The store: all persistent state of the gateway, behind one facade.

Its API is async; each method runs one short transaction of a domain operation (``executions``,
``events``, ``idempotency``, ``locks``, ``approvals``, ``usage``: functions over a
:class:`~gateway.store.sql.Db`) through the backend's :class:`~gateway.store.transactor.Transactor`
(``sqlite.py``, ``postgresql.py``). SQLAlchemy owns the schema (``tables.py``), the URL and the
connection pool; the statements themselves are SQL text (``sql.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Sequence

import anyio
import sqlalchemy as sa
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import SQLModel

from gateway.errors import ConfigError, StoreError
from gateway.events.model import Event
from gateway.store import (
    approvals,
    audit,
    executions,
    idempotency,
    keys,
    locks,
    migrations,
    outbox,
    replicas,
    sessions,
    shadow,
    usage,
)
from gateway.store import events as event_log
from gateway.store.postgresql import PostgresTransactor
from gateway.store.records import (
    ApprovalDecision,
    ApprovalEdit,
    ApprovalRecord,
    ApprovalUnavailable,
    CallIdentity,
    ExecutionRecord,
    Existing,
    IdempotencyClaim,
    LockBusy,
    LockRequest,
    ReplicaRecord,
    Reserved,
    ReserveResult,
    RunMember,
    ShadowDifference,
    call_identity,
)
from gateway.store.sql import Db, Sql
from gateway.store.sqlite import SqliteTransactor
from gateway.store.tables import SCHEMA_VERSION, TABLES
from gateway.store.transactor import Observer, Transactor
from gateway.types import Status

log = logging.getLogger("toolgate.store")

__all__ = [
    "ApprovalUnavailable",
    "CallIdentity",
    "Db",
    "Existing",
    "ReserveResult",
    "Reserved",
    "Store",
    "call_identity",
]

SCHEMA_VERSION_ROW = Sql("SELECT version FROM schema_version WHERE id = 1")
INSERT_SCHEMA_VERSION = Sql("INSERT INTO schema_version (id, version) VALUES (1, ?)")
UPDATE_SCHEMA_VERSION = Sql("UPDATE schema_version SET version = ? WHERE id = 1")


BACKENDS: dict[str, Callable[[str], Transactor]] = {
    "sqlite": SqliteTransactor,
    "postgresql": PostgresTransactor,
}
"""The transactor of each URL scheme (``postgresql+psycopg://`` is ``postgresql``)."""


def transactor_for(url: str) -> Transactor:
    """The backend of a database URL; ConfigError names ``database_url`` when the URL
    cannot be parsed, names no known database, or its driver is not installed (the URL is
    never repeated: it may hold a password)."""
    make = BACKENDS[parse_url(url).get_backend_name()]
    try:
        return make(url)
    except (ImportError, sa.exc.NoSuchModuleError) as exc:
        raise ConfigError(
            f"database_url: the driver is not installed ({type(exc).__name__}: {exc})"
        ) from exc


def parse_url(url: str) -> sa.URL:
    """``database_url`` parsed; ConfigError when it is not a URL of a backend the store has
    (nothing is connected: ``toolgate check`` and ``serve`` ask it before anything starts)."""
    try:
        parsed = sa.engine.make_url(url)
    except (sa.exc.ArgumentError, ValueError) as exc:
        raise ConfigError(f"database_url: not a database URL ({_URL_FORMS})") from exc
    backend = parsed.get_backend_name()
    if backend not in BACKENDS:
        raise ConfigError(f"database_url: unsupported database {backend!r} ({_URL_FORMS})")
    return parsed


_URL_FORMS = "sqlite:///path/to/file.db or postgresql+psycopg://user@host:5432/dbname"


def _check_version(db: Db) -> None:
    """Record the version of a new store, upgrade an older one in place (``migrations``),
    refuse a newer one. Under a lock: replicas opening one store together upgrade it once."""
    db.advisory_lock("toolgate:schema")
    row = db.one(SCHEMA_VERSION_ROW)
    if row is None:
        db.run(INSERT_SCHEMA_VERSION, (SCHEMA_VERSION,))
    elif row[0] > SCHEMA_VERSION:
        raise StoreError(
            f"the store's schema is version {row[0]}, newer than this gateway "
            f"({SCHEMA_VERSION}): upgrade the gateway"
        )
    elif row[0] < SCHEMA_VERSION:
        log.warning("upgrading the store's schema from version %d to %d", row[0], SCHEMA_VERSION)
        migrations.upgrade(db, row[0], SCHEMA_VERSION)
        db.run(UPDATE_SCHEMA_VERSION, (SCHEMA_VERSION,))


def _by_key(request: LockRequest) -> str:
    return request.key


def _ping(db: Db) -> None:
    db.one("SELECT 1")


class Store:
    """All persistent state of the gateway."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.transactor = transactor_for(url)
        self.engine = self.transactor.engine
        self.dialect = self.transactor.dialect
        self._integrity_error = self.dialect.integrity_error
        # The transactor's own bound methods (no call through the facade on the way): each
        # runs ``fn(db, *args)`` in a transaction. Tests and the bench use them too.
        self._write = self.transactor.write
        self._read = self.transactor.read
        self._read_quick = self.transactor.read_quick
        self._tx = self.transactor.transaction
        self._revocations = keys.Revocations(self._revoked_among)
        self._ended_sessions = keys.Revocations(self._ended_among)
        self.notices: outbox.Notices | None = None
        """Makes the notifications an approval change writes with it (``notify_with``)."""

    def notify_with(self, notices: outbox.Notices | None) -> None:
        """Write, in the transaction of each approval requested, decided, expired or
        withdrawn, the notifications ``notices`` makes of it (None: none;
        docs/operations.md)."""
        self.notices = notices

    def observe(self, hook: Observer | None, thread_cpu: bool = False) -> None:
        """Time every transaction: ``hook(name, wall_s, thread_cpu_s)`` is called after each,
        on the thread that ran it, ``name`` its domain operation (e.g. ``"reserve"``; a
        group-commit batch is named after its first write); ``thread_cpu_s`` is None unless
        ``thread_cpu`` (two system calls a transaction). ``None`` stops it."""
        self.transactor.observe(hook, thread_cpu)

    def observe_batches(self, hook: Callable[[int], None] | None) -> None:
        """``hook(size)`` after each group commit (SQLite) of ``size`` writes."""
        self.transactor.observe_batches(hook)

    async def gauges(self) -> tuple[int, int]:
        """(pending approvals, queued executions), for the metrics' gauges."""
        return await self._read(executions.gauges)

    # -- lifecycle ------------------------------------------------------------------------

    def open_sync(self) -> None:
        """Create the schema if missing and check its version."""
        try:
            SQLModel.metadata.create_all(self.engine, tables=list(TABLES))
            self._tx(_check_version, True)
        except SQLAlchemyError as exc:
            lines = str(getattr(exc, "orig", None) or exc).splitlines()  # the driver's: no SQL
            why = lines[0] if lines else type(exc).__name__
            raise StoreError(f"cannot open the store at {self.safe_url}: {why}") from exc
        except StoreError as exc:
            if exc.__cause__ is None:
                raise  # the schema is too new: the message says so
            raise StoreError(f"cannot open the store at {self.safe_url}: {exc.__cause__}") from exc

    async def open(self) -> None:
        await anyio.to_thread.run_sync(self.open_sync)

    @property
    def safe_url(self) -> str:
        return parse_url(self.url).render_as_string(hide_password=True)

    async def ping(self) -> bool:
        try:
            await self._read(_ping)
        except StoreError:
            return False
        return True

    async def aclose(self) -> None:
        await self.transactor.aclose()

    # -- executions -----------------------------------------------------------------------

    async def get_execution(self, execution_id: str) -> ExecutionRecord | None:
        return await self._read(executions.get_execution, execution_id)

    async def find_executions(
        self, principal: str | None, run_id: str | None, call_id: str | None, limit: int = 100
    ) -> list[ExecutionRecord]:
        return await self._read(executions.find_executions, principal, run_id, call_id, limit)

    async def run_members(self, run_id: str, limit: int) -> list[RunMember]:
        """The newest ``limit`` executions of ``run_id``, newest first, each with the seq of
        its last event."""
        return await self._read(executions.run_members, run_id, limit)

    async def insert_completed(
        self, record: ExecutionRecord, events: Sequence[Event]
    ) -> ReserveResult:
        """Record, in one transaction, a call that was never reserved: one rejected before
        reservation, or a read that needed none. Releases any locks it held."""
        return await self._write(executions.insert_completed, record, events)

    async def reserve(
        self,
        record: ExecutionRecord | Callable[[], ExecutionRecord],
        events: Sequence[Event],
        claim: IdempotencyClaim | None,
        consume_approval: str | None = None,
        on_existing: Callable[[Existing], Sequence[Event]] | None = None,
        call: CallIdentity | None = None,
        approval: ApprovalRecord | None = None,
    ) -> ReserveResult:
        """Write the execution record (and idempotency claim) before any side effect.

        An execution with the same principal, run_id and call_id answers first
        (``Existing.by == "call_id"``), then the idempotency claim. ``call`` is the request's
        identity (``call_identity`` of its record), given so a replay need not build the record.

        ``consume_approval`` turns that approval from approved to used in the same
        transaction: a token is spent exactly when its execution becomes durable.
        ``on_existing``: makes the events to append, in the same transaction, to the
        execution an idempotency key resolved to (a replay's note on the first call's log);
        they must be new events, made by that call.
        ``record`` may be a function that builds it, called only when the key resolved to
        nothing (a replay never needs its own record); it must return the same record each
        time it is called.
        ``approval``: the approval a new execution waits for, written in the same transaction
        (the record says ``awaiting_approval`` with its id): no reader ever sees the one
        without the other, and a crash cannot leave an execution waiting for an approval
        that was never written.
        """
        identity = call or call_identity(record() if callable(record) else record)
        try:
            return await self._write(
                executions.reserve,
                identity,
                record,
                events,
                claim,
                consume_approval,
                on_existing,
                approval,
                self.notices if approval is not None else None,
            )
        except self._integrity_error:
            # Another replica reserved the same key or call between our read and insert.
            return await self._write(executions.winner, identity, claim)

    async def append(self, execution_id: str, events: Sequence[Event]) -> None:
        """Make ``events`` durable before the step they describe."""
        await self._write(event_log.append, execution_id, events)

    async def set_status(
        self,
        execution_id: str,
        from_statuses: Sequence[Status],
        to: Status,
        events: Sequence[Event] = (),
        owner: str | None = None,
    ) -> bool:
        """Move the status only from one of ``from_statuses`` (compare-and-set), and with
        ``owner`` only while the execution is still that one's (a flow that was taken over
        writes nothing)."""
        return await self._write(
            executions.set_status, execution_id, from_statuses, to, events, owner
        )

    async def move_status(
        self,
        execution_id: str,
        from_statuses: Sequence[Status],
        to: Status,
        events: Sequence[Event] = (),
    ) -> ExecutionRecord | None:
        """``set_status``, answering the execution as it stands once moved, read in the same
        transaction (what another flow makes of it next cannot slip in); None if not moved."""
        return await self._write(executions.move_status, execution_id, from_statuses, to, events)

    async def take_over(
        self,
        execution_id: str,
        owner: str | None,
        to: Status,
        new_owner: str | None,
        events: Sequence[Event] = (),
    ) -> bool:
        """Recovery's move of an execution that never began its side effect away from
        ``owner`` (gone): only while ``owner`` still has it and it has no ``tool.started``,
        in one transaction; False (nothing changed) otherwise."""
        return await self._write(executions.take_over, execution_id, owner, to, new_owner, events)

    async def resolve_outcome(
        self, execution_id: str, from_outcome: str, outcome: str, result_json: str, event: Event
    ) -> bool:
        """Replace the outcome (only if it still is ``from_outcome``) and log why."""
        return await self._write(
            executions.resolve_outcome, execution_id, from_outcome, outcome, result_json, event
        )

    async def heartbeat(self, execution_id: str) -> None:
        """The owner is alive: recovery leaves executions with a fresh heartbeat alone."""
        await self._write(executions.heartbeat, execution_id)

    async def unfinished(self, statuses: Sequence[Status]) -> list[ExecutionRecord]:
        return await self._read(executions.unfinished, statuses)

    async def claim_queued(self, owner: str, avoid: Collection[str] = ()) -> ExecutionRecord | None:
        """Take the oldest queued execution for ``owner`` (safe across replicas), of a
        principal not in ``avoid``."""
        return await self._write(executions.claim_queued, owner, tuple(sorted(avoid)))

    async def find_by_cancellation_token(self, principal: str, token: str) -> list[ExecutionRecord]:
        return await self._read(executions.find_by_cancellation_token, principal, token)

    async def commit(
        self,
        execution_id: str,
        *,
        outcome: str,
        result_json: str,
        events: Sequence[Event],
        fencing_json: str | None,
    ) -> bool:
        """One transaction: result, idempotency state, lock release and the last events.

        False (and nothing written) when the execution had already completed: a result is
        committed once."""
        return await self._write(
            executions.commit, execution_id, outcome, result_json, events, fencing_json
        )

    async def events(self, execution_id: str, after_seq: int = -1) -> list[Event]:
        return await self._read(event_log.after, execution_id, after_seq)

    async def events_of_types(
        self, execution_ids: Sequence[str], types: Sequence[str]
    ) -> dict[str, list[Event]]:
        """The events of ``types`` of each execution, in order (recovery reads a pass's
        executions at once)."""
        return await self._read(event_log.of_types, execution_ids, tuple(types))

    async def events_page(self, execution_id: str, after_seq: int, limit: int) -> list[Event]:
        """At most ``limit`` events after ``after_seq`` (one poll of a live stream)."""
        return await self._read(event_log.page, execution_id, after_seq, limit)

    async def bounded_events_page(
        self, positions: Sequence[tuple[str, int]], limit: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        """A page of events (a run's, or one execution's) after each execution's seq, in the
        order given, bounded in count and in bytes of data; and whether more remain
        (``events.bounded_page``)."""
        return await self._read(event_log.bounded_page, positions, limit, max_bytes)

    # -- locks ----------------------------------------------------------------------------

    async def try_acquire(
        self, holder: str, holder_call_id: str, requests: Sequence[LockRequest], lease_s: float
    ) -> dict[str, int] | LockBusy:
        """Take every lock in ``requests`` (sorted by key) or none; one attempt."""
        ordered = requests if len(requests) < 2 else sorted(requests, key=_by_key)
        return await self._write(locks.try_acquire, holder, holder_call_id, ordered, lease_s)

    async def renew_locks(self, holder: str, lease_s: float) -> int:
        """Extend the lease of every lock ``holder`` has; returns how many it still holds."""
        return await self._write(locks.renew_locks, holder, lease_s)

    async def release_locks(self, holder: str) -> None:
        await self._write(locks.release_locks, holder)

    # -- approvals ------------------------------------------------------------------------

    async def checkpoint_for_approval(
        self, approval: ApprovalRecord, events: Sequence[Event]
    ) -> None:
        """Park the execution as awaiting_approval with its approval, in one transaction."""
        await self._write(approvals.checkpoint_for_approval, approval, events, self.notices)

    async def decide_approval(
        self,
        approval_id: str,
        verdict: str,
        by: str,
        comment: str | None,
        edit: ApprovalEdit | None = None,
    ) -> ApprovalDecision:
        """pending → ``verdict`` (approved|denied): ``Decided``; else ``Refused``, with why it
        cannot be decided (``records.Refused``). With ``edit`` (approve only), the approval
        binds the edited arguments and the parked execution runs them, in the same
        transaction."""
        return await self._write(
            approvals.decide_approval, approval_id, verdict, by, comment, edit, self.notices
        )

    async def withdraw_approval(self, approval_id: str) -> bool:
        """pending → withdrawn: the call it was for was cancelled (or has ended); its
        notifications written with it."""
        return bool(await self._write(approvals.withdraw_approval, approval_id, self.notices))

    async def resume(
        self, execution_id: str, approval_id: str, events: Sequence[Event], owner: str
    ) -> bool:
        """Spend the approval (approved → used) and mark the parked execution running for
        ``owner``, in one transaction; False when the approval was already spent or never
        approved."""
        return await self._write(approvals.resume, execution_id, approval_id, events, owner)

    async def unresume(
        self, execution_id: str, approval_id: str, events: Sequence[Event], owner: str | None
    ) -> bool:
        """Undo ``resume`` for a call that never began its side effect (its replica,
        ``owner``, died first): the call waits again, parked, and its approval is approved
        again (``used`` → ``approved``), in one transaction, so that a resume runs it on that
        approval; False when the call no longer runs on that spent approval for ``owner``,
        or has ``tool.started``."""
        return await self._write(approvals.unresume, execution_id, approval_id, events, owner)

    async def expired_approvals(self) -> list[ApprovalRecord]:
        """Mark every pending approval past its expiry as expired; returns those it marked."""
        return await self._write(approvals.expired_approvals, self.notices)

    async def unresumed_approvals(self, decided_before_ms: int) -> list[ApprovalRecord]:
        """Approvals approved before ``decided_before_ms`` whose execution is still parked
        (the replica that decided stopped before resuming it)."""
        return await self._read(approvals.unresumed, decided_before_ms)

    async def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        return await self._read(approvals.get_approval, approval_id)

    async def list_approvals(
        self,
        status: str | None,
        limit: int = 100,
        *,
        run_id: str | None = None,
        call_id: str | None = None,
        seen_by: str | None = None,
    ) -> list[ApprovalRecord]:
        """``approvals.list_approvals``: the newest approvals by state, run and call."""
        return await self._read(approvals.list_approvals, status, limit, run_id, call_id, seen_by)

    # -- approval notifications -----------------------------------------------------------

    async def claim_notifications(
        self, owner: str, limit: int, lease_ms: int
    ) -> list[outbox.Delivery]:
        """Take up to ``limit`` due notifications for ``owner`` for ``lease_ms`` (safe across
        replicas: each is claimed by one)."""
        return await self._write(outbox.claim, owner, limit, lease_ms)

    async def settle_notification(
        self, delivery_id: str, owner: str, status: str, due_ms: int, error: str | None = None
    ) -> bool:
        """Record an attempt's end: ``delivered``, ``dead``, or ``pending`` due at ``due_ms``."""
        return await self._write(outbox.settle, delivery_id, owner, status, due_ms, error)

    async def notification_counts(self) -> dict[str, int]:
        """Notifications by status (pending, delivered, dead)."""
        return await self._read(outbox.counts)

    # -- replicas -------------------------------------------------------------------------

    async def beat_replica(self, replica: ReplicaRecord, lease_s: float) -> None:
        """Renew ``replica``'s lease for ``lease_s`` from now (made at the first beat)."""
        await self._write(replicas.beat, replica, int(lease_s * 1000))

    async def leave_replica(self, replica_id: str) -> None:
        """End ``replica_id``'s lease now (a clean stop): others may settle what it owns."""
        await self._write(replicas.leave, replica_id)

    async def replicas(self) -> dict[str, ReplicaRecord]:
        """Every known replica by id, with its lease."""
        return await self._read(replicas.replicas)

    async def prune_replicas(self, before_ms: int) -> int:
        """Forget replicas whose lease ended before ``before_ms`` and own nothing unsettled."""
        return await self._write(replicas.prune, before_ms)

    # -- idempotency and usage ------------------------------------------------------------

    async def release_claim(self, execution_id: str) -> None:
        """Forget the idempotency key of ``execution_id`` so the key can be used again."""
        await self._write(idempotency.release_claim, execution_id)

    async def sweep_idempotency(self) -> int:
        """Delete idempotency records past their expiry; returns how many."""
        return await self._write(idempotency.sweep_idempotency)

    async def recent_usage(
        self, principal: str, workspace_id: str, risk: str, since_ms: int, limit: int
    ) -> tuple[int, int | None]:
        """(how many, up to ``limit``; oldest created_ms) of the executions of ``principal``
        in ``workspace_id`` at ``risk`` created since ``since_ms``: what quotas count."""
        return await self._read_quick(
            usage.recent_usage, principal, workspace_id, risk, since_ms, limit
        )

    async def queued_counts(self, principal: str, share: int, total: int) -> tuple[int, int]:
        """(queued executions of ``principal``, up to ``share``; of everyone, up to
        ``total``): what the bounds on the queue count."""
        return await self._read_quick(usage.queued_counts, principal, share, total)

    async def pending_approvals(self, principal: str, now_ms: int, limit: int) -> int:
        """Pending, unexpired approvals of ``principal`` (up to ``limit``)."""
        return await self._read_quick(usage.pending_approvals, principal, now_ms, limit)

    # -- revoked API keys -----------------------------------------------------------------

    async def is_revoked(self, key_id: str) -> bool:
        """Whether the API key ``key_id`` is revoked: read for every authenticated request,
        by a read that begins after the question (concurrent checks share one read)."""
        return await self._revocations.revoked(key_id)

    def _revoked_among(self, key_ids: Sequence[str]) -> Awaitable[set[str]]:
        # the transactor's read itself (no coroutine of the facade's around it)
        return self._read_quick(keys.revoked_among, key_ids)

    async def revoke_key(self, key_id: str, by: str = "", reason: str = "") -> bool:
        """Revoke ``key_id`` for every replica; False if it already was."""
        return await self._write(keys.revoke, key_id, by, reason)

    async def unrevoke_key(self, key_id: str) -> bool:
        """Accept ``key_id`` again; False if it was not revoked."""
        return await self._write(keys.unrevoke, key_id)

    async def revocations(self) -> list[keys.Revocation]:
        return await self._read(keys.revocations)

    # -- ended page sessions --------------------------------------------------------------

    async def session_ended(self, session_id: str) -> bool:
        """Whether the page session ``session_id`` was signed out: read for every page it
        asks for, as ``is_revoked`` is read (concurrent checks share one read)."""
        return await self._ended_sessions.revoked(session_id)

    def _ended_among(self, session_ids: Sequence[str]) -> Awaitable[set[str]]:
        return self._read_quick(sessions.ended_among, session_ids)

    async def end_session(self, session_id: str, expires_ms: int) -> None:
        """End the page session ``session_id`` for every replica (until ``expires_ms``,
        when the session ends by itself)."""
        await self._write(sessions.end_session, session_id, expires_ms)

    # -- shadow policy differences ---------------------------------------------------------

    async def record_shadow_differences(self, differences: Sequence[ShadowDifference]) -> None:
        """Keep what a shadow policy decided otherwise (one transaction for the batch)."""
        await self._write(shadow.record, differences)

    async def shadow_counts(self, since_ms: int) -> list[tuple[str, str, int]]:
        """(kind, tool, how many) of the shadow differences since ``since_ms``, all replicas'."""
        return await self._read(shadow.counts_since, since_ms)

    async def shadow_differences(self, since_ms: int, limit: int) -> list[ShadowDifference]:
        """The newest ``limit`` shadow differences since ``since_ms``."""
        return await self._read(shadow.latest_since, since_ms, limit)

    # -- the audit trail ------------------------------------------------------------------

    async def audit_chain_page(
        self, after_execution: str, after_seq: int, limit: int
    ) -> list[audit.ChainRow]:
        """Events as stored (links included) after (execution, seq), in chain order."""
        return await self._read(audit.chain_page, after_execution, after_seq, limit)

    async def audit_chain(self, execution_id: str) -> list[audit.ChainRow]:
        return await self._read(audit.chain_of, execution_id)

    async def audit_touched_since(self, floor_id: str) -> list[str]:
        """Executions with an event whose id sorts at ``floor_id`` or later."""
        return await self._read(audit.touched_since, floor_id)

    async def audit_heads_since(self, floor_id: str) -> list[tuple[str, int, str | None]]:
        """The last (seq, hash) of every execution with an event since ``floor_id``."""
        return await self._read(audit.heads_since, floor_id)

    async def audit_last_checkpoint(self) -> audit.CheckpointRecord | None:
        return await self._read(audit.last_checkpoint)

    async def audit_last_link(self) -> audit.CheckpointLink | None:
        """The last checkpoint's number, time and digest (not its heads)."""
        return await self._read(audit.last_link)

    async def audit_checkpoints(self, after_seq: int, limit: int) -> list[audit.CheckpointRecord]:
        return await self._read(audit.checkpoints_after, after_seq, limit)

    async def audit_first_checkpoint_since(self, since_ms: int) -> int | None:
        return await self._read(audit.first_checkpoint_since, since_ms)

    async def audit_add_checkpoint(self, record: audit.CheckpointRecord) -> bool:
        """Append a checkpoint if it still follows the last one (False: another replica
        wrote one first; nothing written)."""
        return await self._write(audit.add_checkpoint, record)

    async def audit_without_events(self) -> list[str]:
        return await self._read(audit.without_events)

    async def schema_version(self) -> int | None:
        """The version recorded in the store (None: a store never opened)."""
        return await self._read(audit.schema_version)
