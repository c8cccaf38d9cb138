"""`spectral contracts hash` and `spectral contracts export`, through typer's CliRunner."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from spectral.cli import app as root_app
from spectral.cli.contracts import DEFAULT_SCHEMA_DIR, app
from tests.unit.contracts import factories as f
from tests.unit.contracts import vectors

runner = CliRunner()


def test_the_group_is_registered_on_the_root_command() -> None:
    result = runner.invoke(root_app, ["contracts", "--help"])
    assert result.exit_code == 0
    assert "export" in result.stdout
    assert "hash" in result.stdout


def test_hash_prints_only_the_hash(tmp_path: Path) -> None:
    envelope = f.cluster_event()
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(f.wire(envelope)["payload"], indent=2))
    result = runner.invoke(app, ["hash", str(path)])
    assert result.exit_code == 0
    assert result.stdout == f"{envelope.payload.snapshot_hash}\n"
    assert result.stderr == ""


def test_hash_reads_stdin() -> None:
    vector = json.loads(vectors.VALID_FILE.read_text("utf-8"))[0]
    result = runner.invoke(app, ["hash", "-"], input=json.dumps(vector["payload"]))
    assert result.exit_code == 0
    assert result.stdout == f"{vector['snapshot_hash']}\n"


def test_hash_agrees_with_every_vector(tmp_path: Path) -> None:
    for vector in json.loads(vectors.VALID_FILE.read_text("utf-8")):
        path = tmp_path / f"{vector['name']}.json"
        path.write_text(json.dumps(vector["payload"], ensure_ascii=False), "utf-8")
        result = runner.invoke(app, ["hash", str(path)])
        assert result.stdout == f"{vector['snapshot_hash']}\n", vector["name"]


def test_invalid_input_exits_non_zero_with_the_reason_on_stderr(tmp_path: Path) -> None:
    for text, reason in [
        ("{oops", "not_json"),
        ("[1]", "not_an_object"),
        ('{"failure_count": 1.5}', "invalid_payload"),
    ]:
        path = tmp_path / "bad.json"
        path.write_text(text)
        result = runner.invoke(app, ["hash", str(path)])
        assert result.exit_code == 1
        assert result.stdout == ""
        assert result.stderr.startswith(f"{reason}: ")


def test_a_missing_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(app, ["hash", str(tmp_path / "absent.json")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr
    assert result.stdout == ""


def test_export_writes_then_check_passes(tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert written == sorted(p.name for p in DEFAULT_SCHEMA_DIR.glob("*.json"))
    for name in written:
        assert (tmp_path / name).read_text() == (DEFAULT_SCHEMA_DIR / name).read_text()
    check = runner.invoke(app, ["export", "--check", "--dir", str(tmp_path)])
    assert check.exit_code == 0
    assert "up to date" in check.stdout


def test_check_fails_on_drift_and_writes_nothing(tmp_path: Path) -> None:
    runner.invoke(app, ["export", "--dir", str(tmp_path)])
    target = tmp_path / "work.thread.opened.v1.json"
    schema = json.loads(target.read_text())
    schema["description"] = "edited by hand"
    target.write_text(json.dumps(schema))
    result = runner.invoke(app, ["export", "--check", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "work.thread.opened.v1.json" in result.stderr
    assert json.loads(target.read_text())["description"] == "edited by hand"


def test_check_fails_when_a_schema_is_missing(tmp_path: Path) -> None:
    result = runner.invoke(app, ["export", "--check", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "out of date" in result.stderr


def test_export_refuses_a_change_that_is_not_additive(tmp_path: Path) -> None:
    shutil.copy(DEFAULT_SCHEMA_DIR / "work.thread.opened.v1.json", tmp_path)
    target = tmp_path / "work.thread.opened.v1.json"
    schema = json.loads(target.read_text())
    payload = schema["$defs"]["ThreadOpenedPayload"]
    payload["properties"]["retired_field"] = {"type": "string"}  # the model no longer has it
    target.write_text(json.dumps(schema))
    result = runner.invoke(app, ["export", "--dir", str(tmp_path)])
    assert result.exit_code == 1
    assert "retired_field: removed (or renamed)" in result.stderr
    assert "retired_field" in target.read_text()  # nothing overwritten
