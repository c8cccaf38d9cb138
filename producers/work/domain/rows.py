"""Rows of the work tables -> frozen values. JSON columns are selected as ``::text`` and
parsed here, so no connection needs a custom codec."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import asyncpg

from producers.work.domain.model import (
    EntryType,
    ItemStatus,
    LedgerEntry,
    Priority,
    Thread,
    ThreadKind,
    ThreadStatus,
    WorkItem,
)


def _json(value: str | None) -> Any:
    return json.loads(value) if value is not None else None


def thread_from_row(row: asyncpg.Record | Mapping[str, Any]) -> Thread:
    return Thread(
        thread_id=row["thread_id"],
        kind=ThreadKind(row["kind"]),
        space_type=row["space_type"],
        space_id=row["space_id"],
        target_ref=_json(row["target_ref"]),
        status=ThreadStatus(row["status"]),
        parent_thread_id=row["parent_thread_id"],
        idempotency_key=row["idempotency_key"],
        continue_on_error=row["continue_on_error"],
        outcome=_json(row["outcome"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        closed_at=row["closed_at"],
        requested_by=row.get("requested_by"),
        cancel_requested_at=row.get("cancel_requested_at"),
        cancel_requested_by=row.get("cancel_requested_by"),
        cancel_reason=row.get("cancel_reason"),
        requested_by_login=row.get("requested_by_login"),
    )


def item_from_row(row: asyncpg.Record | Mapping[str, Any]) -> WorkItem:
    return WorkItem(
        work_item_id=row["work_item_id"],
        thread_id=row["thread_id"],
        sequence=row["sequence"],
        status=ItemStatus(row["status"]),
        attempt=row["attempt"],
        lock_scope=row["lock_scope"],
        project_id=row["project_id"],
        function_key=row["function_key"],
        input=_json(row["input"]),
        not_before=row["not_before"],
        lease_token=row["lease_token"],
        leased_at=row["leased_at"],
        error_message=row["error_message"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        priority=Priority(row.get("priority") or Priority.NORMAL),
        tenant=row.get("tenant"),
        org_id=row.get("org_id"),
        cancel_requested_at=row.get("cancel_requested_at"),
        park_reason=row.get("park_reason"),
        route=row.get("route"),
    )


def entry_from_row(row: asyncpg.Record | Mapping[str, Any]) -> LedgerEntry:
    return LedgerEntry(
        entry_id=row["entry_id"],
        seq=row["seq"],
        thread_id=row["thread_id"],
        work_item_id=row["work_item_id"],
        attempt=row["attempt"],
        entry_type=EntryType(row["entry_type"]),
        payload=_json(row["payload"]),
        hash=row["hash"],
        created_at=row["created_at"],
    )
