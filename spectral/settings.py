"""Settings: one object built from ``SPECTRAL_*`` environment variables.

Secrets (the database URL carries a password, the SASL password) are ``SecretStr`` so they never
appear in a repr, a log line or a traceback. ``describe()`` gives a printable view with them masked.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


SynthesizerKind = Literal["stub", "openai"]


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spectral"


class Settings(BaseSettings):
    """Everything a spectral process reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="SPECTRAL_", frozen=True, extra="ignore")

    kafka_bootstrap: str | None = Field(
        default=None,
        description="host:port[,host:port]; unset = the local stack (`spectral dev up`).",
    )
    kafka_security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    kafka_sasl_mechanism: SaslMechanism | None = None
    kafka_sasl_username: str | None = None
    kafka_sasl_password: SecretStr | None = None
    kafka_ca_file: Path | None = None
    kafka_request_timeout_ms: int = Field(
        default=15_000,
        ge=1_000,
        description="How long any Kafka request may go unanswered before the client drops the "
        "connection and asks again (producers are idempotent: no duplicate). Bounds how long a "
        "frozen broker stalls a process; keep it above the consumer group's 10 s rebalance "
        "timeout.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host:port/db; unset = the local stack.",
    )
    operator_database_url: SecretStr | None = Field(
        default=None,
        description="Login used by `spectral triage` (operator role); unset = database_url "
        "with the spectral_operator role assumed.",
    )
    topic_prefix: str = Field(default="", description="Prepended to every topic name.")
    state_dir: Path = Field(default=Path(".spectral"), description="Local stack state.")
    cache_dir: Path = Field(default_factory=_default_cache_dir, description="Kafka jars cache.")
    kafka_metadata_refresh_seconds: float = Field(
        default=5.0,
        gt=0,
        description="How often consumers re-read the cluster's metadata: new topics, re-created "
        "topics and added partitions are picked up within this time (Kafka's default is 5 min).",
    )
    consumer_idle_in_transaction_seconds: float = Field(
        default=10.0,
        ge=0,
        description="A consumer's database session idle this long inside a batch transaction "
        "(its process frozen or hung) is ended by PostgreSQL, so the member that takes over its "
        "partitions waits at most this long on its dedup rows; 0 disables.",
    )
    consumer_lock_timeout_seconds: float = Field(
        default=15.0,
        ge=0,
        description="A batch statement waiting longer than this on a lock fails and the batch "
        "is retried with backoff (a visible, counted retry instead of a silent wait); 0 disables.",
    )
    log_level: str = "INFO"
    log_format: str = Field(default="auto", description="auto | json | console")
    topic_partitions: int = Field(
        default=3, ge=1, description="Partitions of each topic `spectral topics apply` creates."
    )
    topic_replication_factor: int | None = Field(
        default=None, ge=1, description="Replicas per partition; unset = min(3, brokers)."
    )
    topic_retention_ms: int = Field(
        default=7 * 24 * 3600 * 1000,
        ge=-1,
        description="How long event topics keep records (the replay window; -1 = forever).",
    )
    dlq_retention_ms: int = Field(
        default=30 * 24 * 3600 * 1000,
        ge=-1,
        description="How long dead-letter topics keep records (-1 = forever).",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Interface of the --metrics-port endpoint (/metrics, /healthz, /readyz); "
        "0.0.0.0 in a container.",
    )
    liveness_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="/healthz fails once the event loop made no progress for this long.",
    )
    lag_interval_seconds: float = Field(
        default=10.0, gt=0, description="How often a consumer measures its lag per partition."
    )
    stall_after_seconds: float = Field(
        default=120.0,
        gt=0,
        description="A partition whose committed offset stayed put this long while its end "
        "offset grew is stalled (metric and log line).",
    )

    # -- durable LLM work (issue 6: ADR-035, ADR-0008, ADR-0023) --------------------------------
    synthesizer: SynthesizerKind = Field(
        default="stub",
        description="stub = the deterministic StubSynthesizer; openai = llm_base_url "
        "(any OpenAI-compatible chat-completions endpoint).",
    )
    llm_base_url: str | None = Field(
        default=None, description="e.g. https://gateway.example/v1 (POST {url}/chat/completions)."
    )
    llm_api_key: SecretStr | None = Field(default=None, description="Bearer token of the gateway.")
    llm_timeout_seconds: float = Field(default=60.0, gt=0, description="One model call, at most.")
    llm_routes: dict[str, str] = Field(
        default_factory=dict,
        description='function key -> model, JSON: {"story_generate": "m", "org-1/story_generate": '
        '"m2", "*": "default-model"}. No model names in business code.',
    )
    llm_routes_file: Path | None = Field(
        default=None,
        description="A JSON file of routes (same form as llm_routes, which wins), or "
        '{"routes": {...}, "limits": {...}} with the provider limits beside them.',
    )
    llm_limits: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description='model (or "*") -> {concurrency, rpm, tpm, max_tokens, prompt_price, '
        "completion_price, burst_seconds}, JSON (spectral/llm/limits.py); overrides the routes "
        "file's limits model by model.",
    )
    work_max_attempts: int = Field(
        default=3, ge=1, description="Paid calls per work item, at most."
    )
    work_retry_base_seconds: float = Field(
        default=1.0, gt=0, description="Backoff before retry n: min(base * 2^(n-1), base * 10)."
    )
    work_lease_timeout_seconds: float = Field(
        default=300.0,
        gt=0,
        description="A lease older than this is stale and re-claimed; must exceed llm_timeout.",
    )
    work_pool_size: int = Field(
        default=32,
        ge=1,
        description="Items in flight per executor (their paid calls run concurrently); items "
        "claimed together run in batches of at most half this many, sharing statements.",
    )
    work_sweep_interval_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often the executor recovers stale leases and claims due items itself.",
    )
    work_tenant_max_in_flight: int = Field(
        default=0,
        ge=0,
        description="Items of one tenant (org, else project) leased at once across all "
        "executors, at most; 0 = no cap (fair round-robin claims still apply).",
    )
    work_priority_step_seconds: float = Field(
        default=60.0,
        ge=0,
        description="Ageing of priorities: normal items rank 1 step, low ones 3 steps after "
        "high ones enqueued at the same time (producers/work/domain/priority.py).",
    )
    work_claim_poll_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often an idle executor looks for claimable work no event announced "
        "(a resumed budget, a route's capacity back, a retry come due).",
    )
    work_metric_orgs: list[str] = Field(
        default_factory=list,
        description="Orgs named in the spend metrics' org label; others are counted in one of "
        "16 hash buckets (bounded label sets).",
    )
    work_journal_dir: Path | None = Field(
        default=None,
        description="Local directory of the executor's response journal (paid answers kept, "
        "fsync'd, until the ledger has them); unset = <state_dir>/work-journal/<database>. "
        "Must be a local filesystem that outlives the process (a persistent volume).",
    )

    # -- bounded state (issue 14: `spectral maintenance`) ---------------------------------------
    outbox_retention_seconds: float = Field(
        default=86_400.0,
        gt=0,
        description="Published outbox rows are kept at least this long after publication.",
    )
    dedup_min_horizon_seconds: float = Field(
        default=0.0,
        ge=0,
        description="Dedup keys are kept at least this long, whatever the topics' retention "
        "(a replay window promised beyond what the broker keeps).",
    )
    dedup_grace_seconds: float = Field(
        default=600.0,
        ge=0,
        description="Added to the broker's bound on how long a record stays readable (clock "
        "differences, fetch buffers, producer retries).",
    )
    maintenance_lock_timeout_seconds: float = Field(
        default=2.0,
        gt=0,
        description="How long a rotation waits for transactions in flight on a table; writers "
        "wait behind it at most this long.",
    )

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix_is_legal(cls, value: str) -> str:
        allowed = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
        if not set(value) <= allowed:
            raise ValueError("topic_prefix may contain only letters, digits, '.', '_' and '-'")
        return value

    def describe(self) -> dict[str, Any]:
        """A printable view of the settings with every secret masked."""
        view = self.model_dump(mode="json")
        for name in ("database_url", "operator_database_url"):
            secret = getattr(self, name)
            view[name] = redact_url(secret.get_secret_value()) if secret else None
        if self.kafka_sasl_password is not None:
            view["kafka_sasl_password"] = "********"  # noqa: S105 - a mask, not a password
        return view


def redact_url(url: str) -> str:
    """Replace the password of a URL with asterisks."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":********"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))


def load_settings(**overrides: Any) -> Settings:
    """Build the settings from the environment, with explicit overrides winning."""
    return Settings(**overrides)
