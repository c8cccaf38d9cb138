"""spectral wire contracts: pure code, no I/O.

The envelope (:class:`EventEnvelope`), the payload models of spectral's built-in event types,
the registry type that decodes and encodes records (:class:`EventRegistry`, over the specs it is
given: spectral's features register theirs through entry points like any plugin), RFC 8785
canonical JSON and the failure-cluster ``snapshot_hash``. ``schemas/events/README.md`` is the
wire specification for implementers in other languages.
"""

from contracts.canonical import (
    HASH_EXCLUDED_KEYS,
    MAX_SAFE_INTEGER,
    CanonicalizationError,
    canonical_json,
    snapshot_hash,
)
from contracts.envelope import EventEnvelope
from contracts.errors import DecodeError, DecodeReason, RefusalReason
from contracts.failure_cluster import (
    FAILURE_CLUSTER_DETECTED,
    FAILURE_CLUSTER_SCHEMA_VERSION,
    FAILURE_CLUSTER_SPEC,
    MAX_EVIDENCE_ITEMS,
    MAX_RULE_STUB_CHARS,
    MAX_SUMMARY_CHARS,
    FailureClusterDetectedPayload,
    FailureRef,
    Severity,
    failure_cluster_detected_event,
    snapshot_hash_of_json,
)
from contracts.fields import UtcDatetime, format_utc, parse_utc
from contracts.registry import EventRegistry, envelope_headers
from contracts.schemas import (
    breaking_changes,
    envelope_json_schema,
    render_event_schemas,
    schema_violations,
)
from contracts.spec import EventSpec
from contracts.wire import MAX_PRODUCE_BYTES, MAX_RECORD_BYTES
from contracts.work import (
    LEDGER_ENTRY_APPENDED_SPEC,
    THREAD_OPENED_SPEC,
    WORK_ITEM_ENQUEUED,
    WORK_ITEM_ENQUEUED_SPEC,
    WORK_ITEM_STATE_CHANGED,
    WORK_ITEM_STATE_CHANGED_SPEC,
    WORK_LEDGER_ENTRY_APPENDED,
    WORK_SCHEMA_VERSION,
    WORK_THREAD_OPENED,
    LedgerEntryAppendedPayload,
    LedgerEntryType,
    ThreadOpenedPayload,
    WorkItemEnqueuedPayload,
    WorkItemStateChangedPayload,
    WorkItemStatus,
    ledger_entry_appended_event,
    thread_opened_event,
    work_item_enqueued_event,
    work_item_state_changed_event,
)

__all__ = [
    "FAILURE_CLUSTER_DETECTED",
    "FAILURE_CLUSTER_SCHEMA_VERSION",
    "FAILURE_CLUSTER_SPEC",
    "HASH_EXCLUDED_KEYS",
    "LEDGER_ENTRY_APPENDED_SPEC",
    "MAX_EVIDENCE_ITEMS",
    "MAX_PRODUCE_BYTES",
    "MAX_RECORD_BYTES",
    "MAX_RULE_STUB_CHARS",
    "MAX_SAFE_INTEGER",
    "MAX_SUMMARY_CHARS",
    "THREAD_OPENED_SPEC",
    "WORK_ITEM_ENQUEUED",
    "WORK_ITEM_ENQUEUED_SPEC",
    "WORK_ITEM_STATE_CHANGED",
    "WORK_ITEM_STATE_CHANGED_SPEC",
    "WORK_LEDGER_ENTRY_APPENDED",
    "WORK_SCHEMA_VERSION",
    "WORK_THREAD_OPENED",
    "CanonicalizationError",
    "DecodeError",
    "DecodeReason",
    "EventEnvelope",
    "EventRegistry",
    "EventSpec",
    "FailureClusterDetectedPayload",
    "FailureRef",
    "LedgerEntryAppendedPayload",
    "LedgerEntryType",
    "RefusalReason",
    "Severity",
    "ThreadOpenedPayload",
    "UtcDatetime",
    "WorkItemEnqueuedPayload",
    "WorkItemStateChangedPayload",
    "WorkItemStatus",
    "breaking_changes",
    "canonical_json",
    "envelope_headers",
    "envelope_json_schema",
    "failure_cluster_detected_event",
    "format_utc",
    "ledger_entry_appended_event",
    "parse_utc",
    "render_event_schemas",
    "schema_violations",
    "snapshot_hash",
    "snapshot_hash_of_json",
    "thread_opened_event",
    "work_item_enqueued_event",
    "work_item_state_changed_event",
]
