"""Valid events of every registered type, by hand and as hypothesis strategies."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict
from uuid import UUID

import orjson
import xxhash
from hypothesis import strategies as st

from contracts import (
    CanonicalizationError,
    EventEnvelope,
    FailureClusterDetectedPayload,
    FailureRef,
    LedgerEntryAppendedPayload,
    ThreadOpenedPayload,
    WorkItemEnqueuedPayload,
    WorkItemStateChangedPayload,
    canonical_json,
    failure_cluster_detected_event,
    ledger_entry_appended_event,
    thread_opened_event,
    work_item_enqueued_event,
    work_item_state_changed_event,
)

T0 = datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)
CLUSTER_ID = UUID("6f1c2b1e-4d0a-4c59-9a57-1f0e9f3b7a10")
RULE_ID = UUID("0b7e7f4e-6d2f-4f43-8b1f-3c1a2e9d5b77")
WORKSPACE_ID = UUID("9d4b1a8c-2f6e-4b7d-a1c3-5e8f0a2b4c6d")
EVENT_ID = UUID("3da440f0-fb42-4b25-b9cb-e49a1fc7e851")
THREAD_ID = UUID("a1b2c3d4-0000-4000-8000-000000000001")
ITEM_ID = UUID("a1b2c3d4-0000-4000-8000-000000000002")


def evidence(count: int = 10, summary: str = "bucket acme allows public read") -> list[FailureRef]:
    return [
        FailureRef(
            failure_id=f"scan-1/finding-{i}",
            observed_at=T0 + timedelta(minutes=i),
            summary=summary,
        )
        for i in range(count)
    ]


def cluster_event(**changes: Any) -> EventEnvelope[FailureClusterDetectedPayload]:
    fields: dict[str, Any] = {
        "cluster_id": CLUSTER_ID,
        "rule_id": RULE_ID,
        "workspace_id": WORKSPACE_ID,
        "severity": "high",
        "failure_count": 42,
        "first_observed_at": T0,
        "last_observed_at": T0 + timedelta(hours=1),
        "evidence_bundle": evidence(),
        "suggested_rule_stub": None,
        "event_id": EVENT_ID,
        "occurred_at": T0 + timedelta(hours=1, seconds=1),
    }
    fields.update(changes)
    return failure_cluster_detected_event(**fields)


def wire(envelope: EventEnvelope[Any]) -> dict[str, Any]:
    """The envelope as its parsed JSON object (for editing in tests)."""
    parsed: dict[str, Any] = orjson.loads(envelope.model_dump_json())
    return parsed


def dumps(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj)


def written_cluster(**payload_changes: Any) -> tuple[dict[str, Any], bytes]:
    """A failure-cluster record as its parsed JSON object, its payload changed (not rehashed:
    :func:`rehash`), and its record key."""
    obj = wire(cluster_event())
    obj["payload"].update(payload_changes)
    return obj, obj["payload"]["cluster_id"].encode()


def rehash(obj: dict[str, Any]) -> None:
    """The record's ``snapshot_hash`` and ``idempotency_key`` computed again for its payload as
    it now is: over the canonical form, or for a value the canonical form refuses (an integer
    past 2**53 - 1, a float), over the payload as sorted, compact JSON."""
    payload = obj["payload"]
    body = {k: v for k, v in payload.items() if k not in {"cluster_id", "snapshot_hash"}}
    try:
        text = canonical_json(body)
    except CanonicalizationError:
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    payload["snapshot_hash"] = xxhash.xxh3_128_hexdigest(text)
    obj["idempotency_key"] = f"{payload['cluster_id']}:{payload['snapshot_hash']}"


def thread_event() -> EventEnvelope[ThreadOpenedPayload]:
    return thread_opened_event(
        ThreadOpenedPayload(
            thread_id=THREAD_ID,
            kind="story_generate_epic",
            space_type="project",
            space_id="p-1",
            target_ref="backlog-1/epic-7",
            parent_thread_id=None,
            idempotency_key="p-1:backlog-1:epic-7:generate_stories",
        ),
        event_id=EVENT_ID,
        occurred_at=T0,
    )


def enqueued_event(attempt: int = 1) -> EventEnvelope[WorkItemEnqueuedPayload]:
    return work_item_enqueued_event(
        WorkItemEnqueuedPayload(
            work_item_id=ITEM_ID,
            thread_id=THREAD_ID,
            sequence=0,
            attempt=attempt,
            lock_scope="epic:epic-7",
            not_before=T0,
            kind="story_generate_epic",
            target_ref="backlog-1/epic-7",
            input={"epic_id": "epic-7", "temperature": 0.2, "tags": ["a", None]},
        ),
        event_id=EVENT_ID,
        occurred_at=T0,
    )


def state_changed_event(status: str = "failed") -> EventEnvelope[WorkItemStateChangedPayload]:
    return work_item_state_changed_event(
        WorkItemStateChangedPayload(
            work_item_id=ITEM_ID,
            thread_id=THREAD_ID,
            lock_scope="epic:epic-7",
            status=status,
            attempt=2,
            error_message="gateway timeout",
        ),
        event_id=EVENT_ID,
        occurred_at=T0,
    )


def ledger_event() -> EventEnvelope[LedgerEntryAppendedPayload]:
    return ledger_entry_appended_event(
        LedgerEntryAppendedPayload(
            entry_id=UUID("a1b2c3d4-0000-4000-8000-000000000003"),
            thread_id=THREAD_ID,
            work_item_id=ITEM_ID,
            entry_type="response",
            hash="0123456789abcdef0123456789abcdef",
        ),
        event_id=EVENT_ID,
        occurred_at=T0,
    )


# ---- hypothesis strategies ------------------------------------------------------------------

CHARS = st.characters(codec="utf-8", exclude_characters="\x00")  # but surrogates and U+0000
text = st.text(CHARS, max_size=40)
non_empty = st.text(CHARS, min_size=1, max_size=40)
_any_utc_time = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001 - hypothesis wants naive bounds
    max_value=datetime(2200, 1, 1),  # noqa: DTZ001
    timezones=st.just(UTC),
)
# whole seconds on purpose as well: a zero fraction is where serializers like to differ
utc_times = _any_utc_time | _any_utc_time.map(lambda moment: moment.replace(microsecond=0))
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timedelta(minutes=minutes)
)
json_leaf = st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | text
json_objects = st.dictionaries(
    non_empty,
    st.recursive(
        json_leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(non_empty, inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)


class EnvelopeOptions(TypedDict):
    event_id: UUID
    occurred_at: datetime
    correlation_id: UUID | None
    causation_id: UUID | None


def envelope_options(draw: st.DrawFn) -> EnvelopeOptions:
    return EnvelopeOptions(
        event_id=draw(st.uuids()),
        occurred_at=draw(utc_times),
        correlation_id=draw(st.none() | st.uuids()),
        causation_id=draw(st.none() | st.uuids()),
    )


@st.composite
def failure_refs(draw: st.DrawFn) -> FailureRef:
    return FailureRef(
        failure_id=draw(non_empty),
        observed_at=draw(utc_times),
        summary=draw(st.text(CHARS, max_size=2000)),
    )


@st.composite
def cluster_events(draw: st.DrawFn) -> EventEnvelope[FailureClusterDetectedPayload]:
    first, last = sorted([draw(utc_times), draw(utc_times)])
    return failure_cluster_detected_event(
        cluster_id=draw(st.uuids()),
        rule_id=draw(st.uuids()),
        workspace_id=draw(st.uuids()),
        severity=draw(st.sampled_from(["low", "medium", "high"])),
        failure_count=draw(st.integers(1, 2**53 - 1)),
        first_observed_at=first,
        last_observed_at=last,
        evidence_bundle=draw(st.lists(failure_refs(), max_size=10)),
        suggested_rule_stub=draw(st.none() | text),
        **envelope_options(draw),
    )


@st.composite
def thread_events(draw: st.DrawFn) -> EventEnvelope[ThreadOpenedPayload]:
    payload = ThreadOpenedPayload(
        thread_id=draw(st.uuids()),
        kind=draw(non_empty),
        space_type=draw(non_empty),
        space_id=draw(non_empty),
        target_ref=draw(non_empty),
        parent_thread_id=draw(st.none() | st.uuids()),
        idempotency_key=draw(non_empty),
    )
    return thread_opened_event(payload, **envelope_options(draw))


@st.composite
def enqueued_events(draw: st.DrawFn) -> EventEnvelope[WorkItemEnqueuedPayload]:
    payload = WorkItemEnqueuedPayload(
        work_item_id=draw(st.uuids()),
        thread_id=draw(st.uuids()),
        sequence=draw(st.integers(0, 2**53 - 1)),
        attempt=draw(st.integers(1, 2**53 - 1)),
        lock_scope=draw(non_empty),
        not_before=draw(utc_times),
        kind=draw(non_empty),
        target_ref=draw(non_empty),
        input=draw(json_objects),
    )
    return work_item_enqueued_event(payload, **envelope_options(draw))


@st.composite
def state_changed_events(draw: st.DrawFn) -> EventEnvelope[WorkItemStateChangedPayload]:
    payload = WorkItemStateChangedPayload(
        work_item_id=draw(st.uuids()),
        thread_id=draw(st.uuids()),
        lock_scope=draw(non_empty),
        status=draw(
            st.sampled_from(["queued", "claimed", "running", "applied", "failed", "dead_letter"])
        ),
        attempt=draw(st.integers(1, 2**53 - 1)),
        error_message=draw(st.none() | text),
    )
    return work_item_state_changed_event(payload, **envelope_options(draw))


@st.composite
def ledger_events(draw: st.DrawFn) -> EventEnvelope[LedgerEntryAppendedPayload]:
    payload = LedgerEntryAppendedPayload(
        entry_id=draw(st.uuids()),
        thread_id=draw(st.uuids()),
        work_item_id=draw(st.none() | st.uuids()),
        entry_type=draw(
            st.sampled_from(["prompt", "response", "parse_report", "mutation_report", "error"])
        ),
        hash=draw(non_empty),
    )
    return ledger_entry_appended_event(payload, **envelope_options(draw))


ANY_EVENT = st.one_of(
    cluster_events(), thread_events(), enqueued_events(), state_changed_events(), ledger_events()
)


EDIT_BYTES = b'"\\{}[],:0129aefnrtuz -+.\x00\x01\x7f\xc3\xa9\xed\xff/'
"""Bytes a record is edited with: JSON's punctuation, digits, escape letters, controls, the
pieces of UTF-8 and of what is not UTF-8."""


def byte_edited(data: st.DataObject, value: bytes) -> bytes:
    """``value`` with one to three bytes replaced, inserted or deleted (:data:`EDIT_BYTES`)."""
    edited = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(edited) - 1))
        action = data.draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = data.draw(st.sampled_from(EDIT_BYTES))
        if action == "replace":
            edited[at] = byte
        elif action == "insert":
            edited.insert(at, byte)
        else:
            del edited[at]
    return bytes(edited)
