"""`spectral contracts hash` and `spectral contracts export`, through typer's CliRunner."""

from __future__ import annotations

import json
import re
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
        if vector["name"] not in vectors.CLUSTER_PAYLOAD_CASES:
            continue
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


def test_hash_refuses_a_payload_the_contract_refuses_with_every_reason(tmp_path: Path) -> None:
    payload = f.wire(f.cluster_event())["payload"]
    payload["severity"] = "catastrophic"
    payload["evidence_bundle"][0]["summary"] = "a\u0000b"
    payload["score"] = 0.5
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(payload))
    result = runner.invoke(app, ["hash", str(path)])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.startswith("invalid_payload: ")
    for problem in ("payload.severity", "U+0000", "payload.score"):
        assert problem in result.stderr


def test_hash_ignores_the_snapshot_hash_it_computes(tmp_path: Path) -> None:
    envelope = f.cluster_event()
    payload = f.wire(envelope)["payload"]
    del payload["snapshot_hash"]
    path = tmp_path / "payload.json"
    path.write_text(json.dumps(payload))
    result = runner.invoke(app, ["hash", str(path)])
    assert result.stdout == f"{envelope.payload.snapshot_hash}\n"


def test_check_accepts_a_valid_record_and_names_its_keys(tmp_path: Path) -> None:
    envelope = f.cluster_event()
    path = tmp_path / "record.json"
    path.write_bytes(f.dumps(f.wire(envelope)))
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("ok platform.failure_cluster.detected ")
    assert f"record_key={envelope.payload.cluster_id} (must be the record key)" in result.stdout
    keyed = runner.invoke(app, ["check", str(path), "--key", str(envelope.payload.cluster_id)])
    assert keyed.exit_code == 0
    assert "(must be" not in keyed.stdout


def test_check_refuses_like_the_consumer(tmp_path: Path) -> None:
    envelope = f.cluster_event()
    good = f.wire(envelope)
    tampered = f.wire(envelope)
    tampered["payload"]["failure_count"] += 1
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n".join([f.dumps(good), f.dumps(tampered), b"{oops"]) + b"\n")
    result = runner.invoke(app, ["check", "--lines", "--json", str(path)])
    assert result.exit_code == 1
    verdicts = [json.loads(line) for line in result.stdout.splitlines()]
    assert [v["verdict"] for v in verdicts] == ["ok", "refused", "refused"]
    assert [v.get("reason") for v in verdicts] == [None, "hash_mismatch", "not_json"]
    wrong_key = runner.invoke(app, ["check", "-", "--key", "k"], input=f.dumps(good).decode())
    assert wrong_key.exit_code == 1
    assert wrong_key.stdout.startswith("refused record_key_mismatch: ")


def test_check_of_no_records_is_not_a_pass(tmp_path: Path) -> None:
    """A producer's CI pipes its output through check --lines: a generator that wrote nothing
    must fail the step, not pass it."""
    path = tmp_path / "records.jsonl"
    path.write_bytes(b"\n  \n")
    result = runner.invoke(app, ["check", "--lines", str(path)])
    assert result.exit_code == 1
    assert "no records" in result.stderr


def test_check_and_hash_run_from_another_directory(tmp_path: Path) -> None:
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    spectral = Path(sys.executable).with_name("spectral")
    envelope = f.cluster_event()
    (tmp_path / "r.json").write_bytes(f.dumps(f.wire(envelope)))
    done = subprocess.run(
        [str(spectral), "contracts", "check", "r.json", "--key", str(envelope.payload.cluster_id)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok ")


def test_asyncapi_prints_the_checked_in_document_and_nothing_else() -> None:
    result = runner.invoke(app, ["asyncapi"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (DEFAULT_SCHEMA_DIR / "asyncapi.json").read_text("utf-8")
    assert result.stderr == ""
    json.loads(result.stdout)  # one JSON document, ready for a pipe


def test_asyncapi_of_an_unknown_plugin_exits_2() -> None:
    result = runner.invoke(app, ["asyncapi", "--plugin", "no-such-plugin"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "no plugin named 'no-such-plugin'" in result.stderr


def test_export_fills_the_spec_s_generated_tables_and_check_sees_a_hand_edit(
    tmp_path: Path,
) -> None:
    spec = (DEFAULT_SCHEMA_DIR / "README.md").read_text("utf-8")
    emptied = re.sub(
        r"(<!-- generated: [a-z-]+ \(spectral contracts export\) -->\n).*?(<!-- end generated)",
        r"\1\2",
        spec,
        flags=re.DOTALL,
    )
    assert emptied != spec
    (tmp_path / "README.md").write_text(emptied, "utf-8")
    result = runner.invoke(app, ["export", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "README.md").read_text("utf-8") == spec
    edited = spec.replace("| `dlq.consumer` |", "| `dlq.consumer_name` |")
    (tmp_path / "README.md").write_text(edited, "utf-8")
    check = runner.invoke(app, ["export", "--check", "--dir", str(tmp_path)])
    assert check.exit_code == 1
    assert "README.md" in check.stderr
    assert (tmp_path / "README.md").read_text("utf-8") == edited
