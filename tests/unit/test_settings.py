from __future__ import annotations

import io
import json

import pytest
import structlog

from producers.work.domain.settings import WorkSettings
from spectral.llm.settings import LlmSettings
from spectral.observability.logging import configure_logging, get_logger
from spectral.settings import Settings, load_settings, redact_url

CANARY = "canary-Zq81xV"


def test_settings_come_from_spectral_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTRAL_KAFKA_BOOTSTRAP", "127.0.0.1:1234")
    monkeypatch.setenv("SPECTRAL_TOPIC_PREFIX", "x.")
    monkeypatch.setenv("SPECTRAL_KAFKA_SECURITY_PROTOCOL", "SASL_SSL")
    monkeypatch.setenv("SPECTRAL_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
    current = Settings()
    assert current.kafka_bootstrap == "127.0.0.1:1234"
    assert current.topic_prefix == "x."
    assert current.kafka_security_protocol.value == "SASL_SSL"
    assert current.kafka_sasl_mechanism is not None
    assert current.kafka_sasl_mechanism.value == "SCRAM-SHA-512"


def test_bad_topic_prefix_is_refused() -> None:
    with pytest.raises(ValueError, match="topic_prefix"):
        Settings(topic_prefix="a b")


def test_passwords_never_appear_in_repr_or_describe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTRAL_DATABASE_URL", f"postgresql://app:{CANARY}@db:5432/spectral")
    monkeypatch.setenv("SPECTRAL_KAFKA_SASL_PASSWORD", CANARY)
    current = Settings()
    assert CANARY not in repr(current)
    assert CANARY not in str(current)
    assert CANARY not in json.dumps(current.describe())
    assert current.describe()["database_url"] == "postgresql://app:********@db:5432/spectral"


def test_redact_url_keeps_urls_without_password() -> None:
    url = "postgresql://app@db/x?passfile=/p"
    assert redact_url(url) == url


def test_logs_mask_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECTRAL_DATABASE_URL", f"postgresql://app:{CANARY}@db:5432/spectral")
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    log = get_logger("test")
    current = Settings()
    secret_url = current.database_url.get_secret_value() if current.database_url else ""
    log.info("connecting", url=secret_url, password=CANARY, settings=current)
    log.info("dsn is %s", secret_url)
    structlog.reset_defaults()
    out = stream.getvalue()
    assert "connecting" in out
    assert CANARY not in out


def test_a_section_reads_its_variables_and_the_overrides_of_its_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPECTRAL_WORK_POOL_SIZE", "7")
    monkeypatch.setenv("SPECTRAL_LLM_TIMEOUT_SECONDS", "12.5")
    current = load_settings(work_max_attempts=5, topic_prefix="p.")
    work = WorkSettings.of(current)
    assert (work.work_max_attempts, work.work_pool_size) == (5, 7)
    assert LlmSettings.of(current).llm_timeout_seconds == 12.5
    assert WorkSettings.of(current) is work  # read once per settings object
    assert current.topic_prefix == "p."
    assert "work_max_attempts" not in current.model_dump()  # the framework's own stay its own
    changed = current.replace(work_max_attempts=2, topic_prefix="q.")
    assert (WorkSettings.of(changed).work_max_attempts, changed.topic_prefix) == (2, "q.")
    assert WorkSettings.of(changed).work_pool_size == 7
    assert WorkSettings.of(current).work_max_attempts == 5


def test_a_bad_value_of_a_section_is_refused_when_read() -> None:
    current = load_settings(work_max_attempts=0)
    with pytest.raises(ValueError, match="work_max_attempts"):
        WorkSettings.of(current)


def test_the_api_token_is_a_secret() -> None:
    current = load_settings(api_token="spt_" + "s" * 43)
    assert "sss" not in repr(current)
    assert current.describe()["api_token"] == "********"  # noqa: S105 - a mask
