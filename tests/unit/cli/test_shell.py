"""The `spectral` command as a shell user meets it: version, -h, readable and fast help, options
refused like their siblings, and the exit codes the docs promise (2 configuration, 3 an
unavailable server) for every command that talks to a server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.testing import CliRunner

from spectral.cli import app, commands, load_command, unwrap

SPECTRAL = str(Path(sys.executable).with_name("spectral"))
ROOT = Path(__file__).resolve().parents[3]


def _spectral(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    return subprocess.run(
        [SPECTRAL, *args],
        env={**base, **(env or {})},
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


IMPORTS_AT_EXIT = (
    "import atexit, pathlib, sys; out = pathlib.Path(sys.argv.pop(1)); sys.argv[0] = 'spectral'; "
    "atexit.register(lambda: out.write_text(' '.join({m.split('.')[0] for m in sys.modules}))); "
    "from spectral.cli import main; main()"
)
"""`spectral ARGS` as its console script runs it (``spectral.cli.main``), writing the top-level
packages it imported to a file when it exits."""


def _spectral_importing(
    out: Path, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """`spectral ARGS` (:data:`IMPORTS_AT_EXIT`) and the top-level packages it imported."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPECTRAL_")}
    done = subprocess.run(
        [sys.executable, "-c", IMPORTS_AT_EXIT, str(out), *args],
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done, set(out.read_text().split())


DRIVERS = {"aiokafka", "confluent_kafka", "asyncpg"}
WEB = {"fastapi", "uvicorn", "starlette", "mcp", "jinja2", "sse_starlette"}
HEAVY = DRIVERS | WEB
"""What a command's --help and its refusal of a bad setting need not load: the Kafka clients,
the database driver, the web stack. Every `spectral` process pays for what it imports (the
suite starts hundreds), so a command module imports them inside the function that runs."""

HELP_LOADS = {
    "api": HEAVY,  # serves HTTP: its --max-body-bytes default is the request guard's
    "consume": DRIVERS,  # its --batch-growth default is the engine's
    "maintenance": DRIVERS,
    "threads": DRIVERS,  # the work domain's types are its options' types
    "work": DRIVERS,
    "triage": DRIVERS,  # its --severity type lives beside the operator's repository
}
"""Commands whose --help still loads some of :data:`HEAVY` (and why): the next to make lazy."""

REFUSAL_LOADS = {
    "dlq": DRIVERS,  # --topic is parsed by the dead-letter module, before the settings
    "offsets": DRIVERS,  # offsets and times are parsed with the Kafka client's types
    "replay": DRIVERS,
    "threads": DRIVERS,
    "triage": DRIVERS,
}
"""Commands whose refusal of a bad setting (exit 2) still loads some of :data:`HEAVY`."""


def test_version_and_short_help() -> None:
    version = _spectral("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"spectral {metadata.version('spectral')}"
    short = _spectral("-h")
    assert short.returncode == 0
    assert "Usage: spectral" in short.stdout
    sub = _spectral("consume", "-h")
    assert sub.returncode == 0
    assert "--max-batch" in sub.stdout


def test_the_licence_ships() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8")


def test_help_loads_no_command_because_commands_load_lazily() -> None:
    # What keeps `spectral --help` fast is what it does not import; its time is `make bench`'s
    # business, not a timed test's (a loaded machine would fail one).
    shown = _spectral("--help")
    assert shown.returncode == 0
    assert {"clusters", "triage", "work", "threads", "demo"} <= set(shown.stdout.split())
    # Listing every command reads the plugins' declarations (spectral's features among them),
    # which import nothing heavy either.
    heavy = {"aiokafka", "asyncpg", "fastapi", "uvicorn", "pydantic", "contracts", "mcp"}
    assert _packages_loaded_by("import spectral.cli; spectral.cli.commands()", heavy) == set()


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_loads_with_readable_help(name: str, tmp_path: Path) -> None:
    """Each lazily listed command exists, its listed help is its own, help reads as words
    (no `<bool>`/`<str>` type placeholders), and showing it loads nothing of :data:`HEAVY`
    beyond what :data:`HELP_LOADS` admits."""
    command = load_command(name)
    first_line = (command.help or "").strip().splitlines()[0]
    assert first_line.startswith(commands()[name][1].rstrip(".")[:40])
    shown, loaded = _spectral_importing(tmp_path / "modules", name, "--help")
    assert shown.returncode == 0, shown.stderr
    assert f"Usage: spectral {name}" in shown.stdout
    for placeholder in ("<bool>", "<str>", "<int>", "<float>"):
        assert placeholder not in shown.stdout
    assert loaded & HEAVY - HELP_LOADS.get(name, set()) == set()


def test_consume_refuses_a_batch_of_zero_like_replay() -> None:
    for args in (["consume", "rule-candidates"], ["replay", "rule-candidates"]):
        result = _spectral(*args, "--max-batch", "0")
        assert result.returncode == 2, result.stdout + result.stderr
        assert "--max-batch" in result.stderr


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# Commands that reach a server, with arguments that pass validation.
SERVER_COMMANDS: list[list[str]] = [
    ["db", "migrate"],
    ["topics", "plan"],
    ["outbox", "status"],
    ["outbox", "relay", "--once"],
    ["clusters", "tick"],
    ["clusters", "list"],
    ["triage", "list"],
    ["threads", "list", "--project", "p"],
    ["dlq", "list", "--topic", "some.topic"],
    ["offsets", "reset", "rule-candidates", "--to-earliest"],
    ["replay", "rule-candidates", "--from-beginning"],
    ["tokens", "list"],
    ["mcp"],
]


@pytest.mark.parametrize("args", SERVER_COMMANDS, ids=" ".join)
def test_no_stack_configured_exits_2(args: list[str], tmp_path: Path) -> None:
    result = _spectral(
        *args,
        env={"SPECTRAL_STATE_DIR": str(tmp_path / "none"), "XDG_STATE_HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "error:" in result.stderr


@pytest.mark.parametrize("args", SERVER_COMMANDS, ids=" ".join)
def test_invalid_settings_exit_2(args: list[str], tmp_path: Path) -> None:
    """A bad setting exits 2 before anything of :data:`HEAVY` beyond what :data:`REFUSAL_LOADS`
    admits is loaded."""
    result, loaded = _spectral_importing(
        tmp_path / "modules", *args, env={"SPECTRAL_TOPIC_PREFIX": "bad prefix!"}
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert "SPECTRAL_TOPIC_PREFIX" in result.stderr or "topic_prefix" in result.stderr
    assert loaded & HEAVY - REFUSAL_LOADS.get(args[0], set()) == set()


def test_an_invalid_setting_of_a_plugin_exits_2_at_start() -> None:
    result = _spectral("topics", "plan", env={"SPECTRAL_WORK_MAX_ATTEMPTS": "0"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert "work_max_attempts" in result.stderr


@pytest.mark.parametrize("args", SERVER_COMMANDS, ids=" ".join)
def test_unreachable_servers_exit_3(args: list[str]) -> None:
    result = _spectral(
        *args,
        env={
            "SPECTRAL_KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}",
            "SPECTRAL_DATABASE_URL": f"postgresql://u:p@127.0.0.1:{_closed_port()}/db",
        },
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr


SERVERS = {"api", "mcp"}
"""The commands that serve HTTP (and MCP): the only ones that import the web stack."""


def test_no_command_but_the_servers_imports_the_web_stack() -> None:
    """Every other command (spectral's and the built-in plugins') starts without paying for the
    HTTP API, the console or MCP: `spectral dlq`, `consume`, `work`... start in many processes."""
    code = (
        "from spectral.cli import commands, load_command; "
        f"[load_command(name) for name in commands() if name not in {sorted(SERVERS)!r}]"
    )
    assert _packages_loaded_by(code, WEB) == set()


def test_a_command_run_to_its_end_imports_no_web_stack(tmp_path: Path) -> None:
    """What a command imports while it runs counts too (imports inside functions)."""
    code = (
        "import atexit, pathlib, sys; out = pathlib.Path(sys.argv[1]); "
        "atexit.register(lambda: out.write_text(' '.join({m.split('.')[0] "
        "for m in sys.modules}))); "
        "sys.argv = ['spectral', 'contracts', 'asyncapi']; "
        "from spectral.cli import main; main()"
    )
    out = tmp_path / "modules"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "asyncapi" in done.stdout
    assert set(out.read_text().split()) & WEB == set()


def _packages_loaded_by(code: str, packages: set[str]) -> set[str]:
    """Which of ``packages`` a fresh interpreter has imported after running ``code``."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; {code}; print(' '.join({{m.split('.')[0] for m in sys.modules}}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(probe.stdout.split()) & packages


def test_every_deployment_command_takes_the_name_as_its_argument() -> None:
    """One naming rule: `consume NAME`, `replay NAME`, `rebuild NAME`, `offsets reset NAME`."""
    offsets = load_command("offsets")
    assert isinstance(offsets, TyperGroup)
    commands = {
        "consume": load_command("consume"),
        "replay": load_command("replay"),
        "rebuild": load_command("rebuild"),
        "offsets reset": offsets.commands["reset"],
    }
    for label, command in commands.items():
        first = command.params[0]
        assert (first.param_type_name, first.name) == ("argument", "name"), label
        # The old spelling (--consumer NAME) still works where it existed, hidden from help.
        assert all(getattr(p, "hidden", False) for p in command.params if p.name == "consumer")


def test_the_deprecated_spelling_must_agree_with_the_name() -> None:
    runner = CliRunner()
    both = runner.invoke(
        app, ["replay", "rule-candidates", "--consumer", "work-executor", "--from-beginning"]
    )
    assert both.exit_code == 2
    assert "NAME is 'rule-candidates' but --consumer is 'work-executor'" in both.output
    missing = runner.invoke(app, ["offsets", "reset", "--to-earliest"])
    assert missing.exit_code == 2
    assert "spectral offsets reset NAME" in missing.output


def _tree(command: Any) -> Iterator[Any]:
    yield command
    for sub in getattr(command, "commands", {}).values():
        yield from _tree(sub)


def test_one_help_style_throughout() -> None:
    """`spectral --help` uses the rich panels every subcommand's help uses."""
    root = _spectral("--help", env={"COLUMNS": "100"})
    assert "╭─ Commands" in root.stdout
    assert "╭─ Options" in root.stdout
    work = _spectral("work", "--help", env={"COLUMNS": "100"})
    assert "╭─ Commands" in work.stdout


@pytest.mark.parametrize("name", sorted(commands()))
def test_no_help_breaks_a_line_mid_sentence(name: str) -> None:
    """A docstring's wrapping is not the terminal's: inside a paragraph every line break is
    gone (the help is re-wrapped to the terminal), so no listing breaks a sentence early."""
    for command in _tree(load_command(name)):
        for text in (command.help or "", command.short_help or ""):
            for paragraph in text.split("\n\n"):
                lines = paragraph.split("\n")
                if lines[0] == "\b" or any(line.startswith((" ", "\t")) for line in lines[1:]):
                    continue
                assert "\n" not in paragraph, (command.name, paragraph)


def test_unwrap_keeps_paragraphs_and_examples() -> None:
    text = "One sentence\nwrapped.\n\n  $ spectral x\n  $ spectral y\n\nLast\npart."
    assert unwrap(text) == "One sentence wrapped.\n\n  $ spectral x\n  $ spectral y\n\nLast part."
