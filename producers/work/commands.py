"""The commands of ADR-035 §7: generate one epic's stories, generate all epics' stories.

Each command is one transaction: resolve the semantic identity (policy.py), create / reopen /
adopt threads, insert work items, and write their ``work.thread.opened`` and
``work.item.enqueued`` events to the outbox. Nothing is published unless all of it commits.

Concurrency: two identical commands at once race on the partial unique index of live threads
per identity; the loser resolves again and returns the winner's thread, so both callers get the
same thread and exactly one work item exists (hence one paid call). A generate-all takes the
project lock (orchestration, ADR-035 §9) for its whole transaction; it takes no target lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg

from producers.work.domain import events
from producers.work.domain.documents import STORY_BACKLOG, validate_backlog
from producers.work.domain.enqueue import NewItem, NewThread
from producers.work.domain.hashing import content_hash
from producers.work.domain.identity import (
    check_identifier,
    epic_lock_scope,
    project_lock_scope,
    thread_identity,
)
from producers.work.domain.locks import TransactionLocks
from producers.work.domain.model import (
    SPACE_PROJECT,
    STORY_FUNCTION_KEY,
    Priority,
    ThreadKind,
    ThreadStatus,
)
from producers.work.domain.priority import DEFAULT_STEP_SECONDS
from producers.work.domain.priority import delay as priority_delay
from producers.work.domain.story.function import prompt_bytes
from producers.work.domain.types import Conn
from producers.work.policy import (
    DISPOSITION,
    Action,
    ChildAction,
    Disposition,
    decide,
    decide_child,
)
from producers.work.repository import CommandRepository, StoredDocument
from spectral.db.connect import guarded
from spectral.errors import PermanentError, TransientError
from spectral.outbox.writer import OutboxItem, enqueue

Clock = Callable[[], datetime]
_RESOLVE_ROUNDS = 5


class UnknownTargetError(PermanentError):
    """The document or epic a command names does not exist."""


class DocumentConflictError(PermanentError):
    """A document with this id exists with other content or in another project (documents
    change only by mutation). ``current_version``: the version stored now."""

    def __init__(self, message: str, *, current_version: int) -> None:
        super().__init__(message)
        self.current_version = current_version


def _check_target(
    project_id: str, document_id: str, epic_ids: Sequence[str], org_id: str | None
) -> None:
    """The identifiers a generate command names are identifiers (ValueError otherwise)."""
    check_identifier(project_id, "project id")
    check_identifier(document_id, "document id")
    for epic in epic_ids:
        check_identifier(epic, "epic id")
    if org_id is not None:
        check_identifier(org_id, "org id")


@dataclass(frozen=True)
class GenerateEpic:
    project_id: str
    document_id: str
    epic_id: str
    force: bool = False
    org_id: str | None = None
    requested_by: str | None = None
    """The principal recorded on the threads it creates (default: the database login)."""
    priority: Priority = Priority.NORMAL
    """How its item ranks among its tenant's waiting items (producers/work/domain/priority.py)."""

    def __post_init__(self) -> None:
        _check_target(self.project_id, self.document_id, (self.epic_id,), self.org_id)


@dataclass(frozen=True)
class GenerateAll:
    project_id: str
    document_id: str
    epic_ids: tuple[str, ...] | None = None  # None = every epic of the document
    continue_on_error: bool = True
    force: bool = False
    org_id: str | None = None
    requested_by: str | None = None
    """The principal recorded on the threads it creates (default: the database login)."""
    priority: Priority = Priority.NORMAL
    """How its items rank among their tenant's waiting items (producers/work/domain/priority.py)."""

    def __post_init__(self) -> None:
        _check_target(self.project_id, self.document_id, self.epic_ids or (), self.org_id)


@dataclass(frozen=True)
class ChildResult:
    epic_id: str
    thread_id: UUID
    status: ThreadStatus
    action: ChildAction


@dataclass(frozen=True)
class CommandResult:
    thread_id: UUID
    status: ThreadStatus
    disposition: Disposition
    children: tuple[ChildResult, ...] = field(default=())


@dataclass(frozen=True)
class DocumentRef:
    document_id: str
    version: int
    created: bool


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass
class _Plan:
    """What one transaction writes: threads, reopenings, adoptions, items, events."""

    new_threads: list[NewThread] = field(default_factory=list)
    reopen: list[tuple[UUID, str, UUID | None]] = field(default_factory=list)
    adopt: list[UUID] = field(default_factory=list)
    items_for: list[tuple[UUID, str, str, Mapping[str, Any]]] = field(default_factory=list)
    """(thread_id, kind, lock_scope, input) of each item to enqueue."""
    parent_id: UUID | None = None
    """The orchestration the adopted threads join (generate-all)."""
    document: StoredDocument | None = None
    """The backlog the items generate stories of (their prompts' bound is computed from it)."""


class WorkCommands:
    """The command side of ADR-035 over a pool whose sessions act as spectral_producer."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        *,
        repository: CommandRepository | None = None,
        clock: Clock = _utc_now,
        priority_step_seconds: float = DEFAULT_STEP_SECONDS,
    ) -> None:
        self._pool = pool
        self._repo = repository or CommandRepository()
        self._clock = clock
        self._priority_step = priority_step_seconds

    # -- documents -------------------------------------------------------------------------

    async def put_document(
        self, project_id: str, document_id: str, content: Mapping[str, Any]
    ) -> DocumentRef:
        """Create a story backlog (version 1). Content identical to the version stored now is a
        no-op (``created`` False, at that version); any other content — at any version, the
        first one included — is refused with ``DocumentConflictError`` naming the current
        version: documents change only through mutations."""
        check_identifier(project_id, "project id")
        check_identifier(document_id, "document id")
        canonical = validate_backlog(content).model_dump(mode="json")
        digest = content_hash(canonical)

        async def run() -> DocumentRef:
            async with self._pool.acquire() as conn, conn.transaction():
                created = await self._repo.insert_document(
                    conn,
                    document_id=document_id,
                    project_id=project_id,
                    doc_type=STORY_BACKLOG,
                    content=canonical,
                    content_hash=digest,
                )
                if created:
                    return DocumentRef(document_id, 1, created=True)
                existing = await self._repo.document(conn, document_id)
            if existing is None:
                raise TransientError("document vanished while being created; try again")
            if existing.project_id != project_id:
                raise DocumentConflictError(
                    f"document {document_id!r} exists in another project",
                    current_version=existing.version,
                )
            if existing.content_hash != digest:
                raise DocumentConflictError(
                    f"document {document_id!r} is at version {existing.version} with other content",
                    current_version=existing.version,
                )
            return DocumentRef(document_id, existing.version, created=False)

        return await guarded("put document", run)

    # -- generate one epic --------------------------------------------------------------------

    async def generate_epic(self, command: GenerateEpic) -> CommandResult:
        identity = thread_identity(
            ThreadKind.STORY_GENERATE_EPIC, command.project_id, command.document_id, command.epic_id
        )

        async def run() -> CommandResult:
            for _ in range(_RESOLVE_ROUNDS):
                async with self._pool.acquire() as conn, conn.transaction():
                    await self._repo.act_as(conn, command.requested_by)
                    document = await self._document(conn, command.document_id, command.project_id)
                    self._require_epics(document, [command.epic_id])
                    result = await self._generate_epic_once(conn, command, identity, document)
                    if result is not None:
                        return result
            raise TransientError("could not settle the thread of this command; try again")

        return await guarded("generate-epic", run)

    async def _generate_epic_once(
        self, conn: Conn, command: GenerateEpic, identity: str, document: StoredDocument
    ) -> CommandResult | None:
        latest = (await self._repo.latest_threads(conn, [identity])).get(identity)
        action = decide(latest.status if latest else None, force=command.force)
        if action in (Action.RETURN_EXISTING, Action.NOOP):
            assert latest is not None  # noqa: S101 - decide() returns these only for a thread
            return CommandResult(latest.thread_id, latest.status, DISPOSITION[action])
        plan = _Plan(document=document)
        scope = epic_lock_scope(command.document_id, command.epic_id)
        item_input = _item_input(command.document_id, command.epic_id, command.org_id)
        if action is Action.CREATE:
            thread_id = uuid.uuid4()
            plan.new_threads.append(
                NewThread(
                    thread_id=thread_id,
                    kind=ThreadKind.STORY_GENERATE_EPIC.value,
                    space_id=command.project_id,
                    target_ref={"document_id": command.document_id, "epic_id": command.epic_id},
                    status=ThreadStatus.OPEN.value,
                    parent_thread_id=None,
                    idempotency_key=identity,
                )
            )
        else:
            assert latest is not None  # noqa: S101
            thread_id = latest.thread_id
            plan.reopen.append((thread_id, ThreadStatus.OPEN.value, None))
        plan.items_for.append((thread_id, ThreadKind.STORY_GENERATE_EPIC.value, scope, item_input))
        if not await self._write(
            conn, plan, project_id=command.project_id, priority=command.priority
        ):
            return None
        return CommandResult(thread_id, ThreadStatus.OPEN, DISPOSITION[action])

    # -- generate all epics ---------------------------------------------------------------------

    async def generate_all(self, command: GenerateAll) -> CommandResult:
        identity = thread_identity(
            ThreadKind.STORY_GENERATE_ALL, command.project_id, command.document_id
        )

        async def run() -> CommandResult:
            for _ in range(_RESOLVE_ROUNDS):
                async with self._pool.acquire() as conn, conn.transaction():
                    await self._repo.act_as(conn, command.requested_by)
                    locks = TransactionLocks(conn)
                    await locks.project(project_lock_scope(command.project_id))
                    document = await self._document(conn, command.document_id, command.project_id)
                    epic_ids = list(command.epic_ids or _epics_of(document))
                    self._require_epics(document, epic_ids)
                    result = await self._generate_all_once(
                        conn, command, identity, epic_ids, document
                    )
                    if result is not None:
                        return result
            raise TransientError("could not settle the threads of this command; try again")

        return await guarded("generate-all", run)

    async def _generate_all_once(
        self,
        conn: Conn,
        command: GenerateAll,
        identity: str,
        epic_ids: list[str],
        document: StoredDocument,
    ) -> CommandResult | None:
        latest = (await self._repo.latest_threads(conn, [identity])).get(identity)
        action = decide(latest.status if latest else None, force=command.force)
        if action in (Action.RETURN_EXISTING, Action.NOOP):
            assert latest is not None  # noqa: S101
            return CommandResult(latest.thread_id, latest.status, DISPOSITION[action])
        plan = _Plan(document=document)
        if action is Action.CREATE:
            parent_id = uuid.uuid4()
            plan.new_threads.append(
                NewThread(
                    thread_id=parent_id,
                    kind=ThreadKind.STORY_GENERATE_ALL.value,
                    space_id=command.project_id,
                    target_ref={"document_id": command.document_id, "epic_ids": epic_ids},
                    status=ThreadStatus.RUNNING.value,
                    parent_thread_id=None,
                    idempotency_key=identity,
                    continue_on_error=command.continue_on_error,
                )
            )
        else:
            assert latest is not None  # noqa: S101
            parent_id = latest.thread_id
            plan.reopen.append((parent_id, ThreadStatus.RUNNING.value, None))
        children = await self._plan_children(conn, command, parent_id, epic_ids, plan)
        if not await self._write(
            conn, plan, project_id=command.project_id, priority=command.priority
        ):
            return None
        status = ThreadStatus.RUNNING
        if all(child.status is ThreadStatus.COMPLETE for child in children):
            # Every epic is already done (adopted complete children): the orchestration closes.
            status = ThreadStatus.COMPLETE
            await self._repo.close_thread(
                conn, parent_id, status.value, _outcome_of(children, status)
            )
        return CommandResult(parent_id, status, DISPOSITION[action], tuple(children))

    async def _plan_children(
        self,
        conn: Conn,
        command: GenerateAll,
        parent_id: UUID,
        epic_ids: list[str],
        plan: _Plan,
    ) -> list[ChildResult]:
        identities = {
            epic: thread_identity(
                ThreadKind.STORY_GENERATE_EPIC, command.project_id, command.document_id, epic
            )
            for epic in epic_ids
        }
        latest = await self._repo.latest_threads(conn, list(identities.values()))
        children: list[ChildResult] = []
        for epic in epic_ids:
            current = latest.get(identities[epic])
            action = decide_child(current.status if current else None, force=command.force)
            scope = epic_lock_scope(command.document_id, epic)
            item_input = _item_input(command.document_id, epic, command.org_id)
            kind = ThreadKind.STORY_GENERATE_EPIC.value
            if action is ChildAction.CREATE:
                child_id = uuid.uuid4()
                plan.new_threads.append(
                    NewThread(
                        thread_id=child_id,
                        kind=kind,
                        space_id=command.project_id,
                        target_ref={"document_id": command.document_id, "epic_id": epic},
                        status=ThreadStatus.OPEN.value,
                        parent_thread_id=parent_id,
                        idempotency_key=identities[epic],
                    )
                )
                plan.items_for.append((child_id, kind, scope, item_input))
                children.append(ChildResult(epic, child_id, ThreadStatus.OPEN, action))
            elif action is ChildAction.RETRY:
                assert current is not None  # noqa: S101
                plan.reopen.append((current.thread_id, ThreadStatus.OPEN.value, parent_id))
                plan.items_for.append((current.thread_id, kind, scope, item_input))
                children.append(ChildResult(epic, current.thread_id, ThreadStatus.OPEN, action))
            else:
                assert current is not None  # noqa: S101
                plan.adopt.append(current.thread_id)
                children.append(ChildResult(epic, current.thread_id, current.status, action))
        plan.parent_id = parent_id
        return children

    # -- shared -----------------------------------------------------------------------------------

    async def _document(self, conn: Conn, document_id: str, project_id: str) -> StoredDocument:
        document = await self._repo.document(conn, document_id)
        if document is None or document.project_id != project_id:
            raise UnknownTargetError(f"no document {document_id!r} in project {project_id!r}")
        return document

    @staticmethod
    def _require_epics(document: StoredDocument, epic_ids: Sequence[str]) -> None:
        known = set(_epics_of(document))
        missing = [epic for epic in epic_ids if epic not in known]
        if missing:
            raise UnknownTargetError(
                f"document {document.document_id!r} has no epic {', '.join(map(repr, missing))}"
            )

    async def _write(self, conn: Conn, plan: _Plan, *, project_id: str, priority: Priority) -> bool:
        """Apply the plan; False (after rolling back to the savepoint) when a racing command
        took one of the identities first — the caller resolves again."""
        now = self._clock()
        try:
            async with conn.transaction():  # a savepoint: a lost race undoes only this plan
                await self._settle(conn, plan)
                if plan.adopt and plan.parent_id is not None:
                    await self._repo.adopt_threads(conn, plan.adopt, plan.parent_id)
                sequences = await self._repo.next_sequences(
                    conn, [thread_id for thread_id, *_ in plan.items_for]
                )
                items = [
                    NewItem(
                        work_item_id=uuid.uuid4(),
                        thread_id=thread_id,
                        sequence=sequences[thread_id],
                        lock_scope=scope,
                        project_id=project_id,
                        function_key=STORY_FUNCTION_KEY,
                        input=item_input,
                        prompt_bytes=_prompt_bytes(plan.document, item_input),
                    )
                    for thread_id, _kind, scope, item_input in plan.items_for
                ]
                delay = priority_delay(priority, self._priority_step).total_seconds()
                await self._repo.insert_items(conn, items, now, priority, delay)
                await enqueue(conn, _events(plan, items, now))
        except _LostRace:
            return False
        except asyncpg.UniqueViolationError:
            # A reopened thread met a live twin created meanwhile (forced command): resolve again.
            return False
        return True

    async def _settle(self, conn: Conn, plan: _Plan) -> None:
        """Insert new threads and reopen retried ones; ``_LostRace`` if a twin got there first."""
        inserted = await self._repo.insert_threads(conn, plan.new_threads)
        if len(inserted) != len(plan.new_threads):
            raise _LostRace
        reopened = await self._repo.reopen_threads(conn, plan.reopen)
        if len(reopened) != len(plan.reopen):
            raise _LostRace


class _LostRace(Exception):  # noqa: N818 - control flow inside _write only
    pass


def _item_input(document_id: str, epic_id: str, org_id: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {"document_id": document_id, "epic_id": epic_id}
    if org_id:
        data["org_id"] = org_id
    return data


def _prompt_bytes(document: StoredDocument | None, item_input: Mapping[str, Any]) -> int | None:
    """An upper bound of the item's prompt's UTF-8 length (None: the claim bounds it from the
    document itself)."""
    if document is None:
        return None
    try:
        return prompt_bytes(document.content, str(item_input["epic_id"]))
    except (KeyError, TypeError, AttributeError):
        return None


def _epics_of(document: StoredDocument) -> list[str]:
    epics = document.content.get("epics")
    return list(epics) if isinstance(epics, dict) else []


def _outcome_of(children: Sequence[ChildResult], status: ThreadStatus) -> dict[str, Any]:
    counts = {s.value: 0 for s in ThreadStatus}
    for child in children:
        counts[child.status.value] += 1
    return {
        "status": status.value,
        "counts": counts,
        "children": {
            str(child.thread_id): {"epic_id": child.epic_id, "status": child.status.value}
            for child in children
        },
    }


def _events(plan: _Plan, items: Sequence[NewItem], now: datetime) -> list[OutboxItem]:
    root = plan.parent_id
    out: list[OutboxItem] = [
        events.thread_opened(
            thread_id=thread.thread_id,
            kind=thread.kind,
            space_type=SPACE_PROJECT,
            space_id=thread.space_id,
            target_ref=thread.target_ref,
            parent_thread_id=thread.parent_thread_id,
            idempotency_key=thread.idempotency_key,
        )
        for thread in plan.new_threads
    ]
    kinds = {thread_id: kind for thread_id, kind, _scope, _input in plan.items_for}
    for item in items:
        target = {"document_id": item.input["document_id"], "epic_id": item.input["epic_id"]}
        out.append(
            events.item_enqueued(
                work_item_id=item.work_item_id,
                thread_id=item.thread_id,
                sequence=item.sequence,
                attempt=1,
                lock_scope=item.lock_scope,
                not_before=now,
                kind=kinds[item.thread_id],
                target_ref=target,
                input_=item.input,
                correlation_id=root or item.thread_id,
                now=now,
            )
        )
    return out
