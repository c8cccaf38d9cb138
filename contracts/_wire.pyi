# Types of the Rust build of the failure-cluster fast path (native/src/lib.rs).

from typing import Any

SOURCES: str
"""The digest of the sources this build was made from (native/build.rs)."""

class Checker:
    def __init__(
        self,
        *,
        view: type[Any],
        event_type: str,
        severities: list[str],
        max_record_bytes: int,
        max_safe_integer: int,
        max_evidence_items: int,
        max_summary_chars: int,
        max_rule_stub_chars: int,
        max_failure_id_chars: int,
        min_year: int,
        max_year: int,
    ) -> None: ...
    def __call__(self, data: bytes, key: bytes | None) -> tuple[Any, str, str] | None: ...
