"""The extension API (spectral.extend) is a deliberate surface: changing it is a decision that
shows in this test, and the example plugin needs nothing but it and spectral.testing."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from typing import Final

from typer.testing import CliRunner

import spectral.extend
from spectral.cli import app

ROOT: Final = Path(__file__).resolve().parents[3]
EXAMPLE: Final = ROOT / "examples" / "deploy-tracker"

STABLE: Final = {
    "DEPLOYMENTS_GROUP",
    "EVENTS_GROUP",
    "EXTENSION_API_VERSION",
    "MIGRATIONS_GROUP",
    "PLUGINS_GROUP",
    "Caller",
    "Command",
    "Console",
    "ConsolePage",
    "Deployment",
    "NavEntry",
    "Measured",
    "Plugin",
    "PluginSettings",
    "Pruned",
    "Resources",
    "RetentionTask",
    "Router",
    "Scope",
    "Tools",
    "connect",
    "console_requires",
    "delete_in_batches",
    "load_settings",
    "requires",
    "resolve_database_url",
    "ConfigurationError",
    "Conn",
    "DecodeError",
    "Delivery",
    "EventEnvelope",
    "EventRegistry",
    "EventSpec",
    "Factory",
    "Handler",
    "HandlerResult",
    "OutboxItem",
    "Outcome",
    "PermanentError",
    "Rebuild",
    "Rejection",
    "Settings",
    "TransientError",
    "enqueue",
    "load_queries",
}
"""Version 1.3 (1.0, 1.1: the plugin declaration, 1.2: ``connect``, 1.3: ``Handler.ahead``).
Adding a name or a member raises the minor number; removing or renaming one the major."""


def test_the_stable_surface_is_exactly_the_documented_one() -> None:
    assert spectral.extend.EXTENSION_API_VERSION == "1.3"
    assert set(spectral.extend.__all__) == STABLE
    for name in STABLE:
        assert getattr(spectral.extend, name) is not None
    documented = (ROOT / "docs" / "howto" / "extend" / "write-a-plugin.md").read_text("utf-8")
    assert [name for name in sorted(STABLE) if f"`{name}`" not in documented] == []


def test_the_example_plugin_imports_only_the_public_api() -> None:
    internal = []
    for path in sorted(EXAMPLE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            internal += [
                f"{path.relative_to(EXAMPLE)}: {m}"
                for m in modules
                if m.split(".")[0] in {"spectral", "contracts", "producers", "consumers"}
                and m not in {"spectral.extend", "spectral.testing"}
            ]
    assert internal == []


def test_exporting_a_plugin_needs_its_folder_and_an_installed_plugin(tmp_path: Path) -> None:
    runner = CliRunner()
    no_dir = runner.invoke(app, ["contracts", "export", "--plugin", "deploy-tracker"])
    assert no_dir.exit_code == 2
    assert "--plugin NAME needs --dir DIR" in no_dir.output
    unknown = runner.invoke(
        app, ["contracts", "export", "--plugin", "nope", "--dir", str(tmp_path)]
    )
    assert unknown.exit_code == 2
    assert "no plugin named 'nope' registers events" in unknown.output
    assert list(tmp_path.iterdir()) == []


def test_a_declaration_imports_nothing_heavy() -> None:
    """A plugin's declaration imports spectral.extend: that must not load the engine, the
    database driver, the web framework or pydantic (``spectral --help`` loads every plugin's)."""
    code = "import spectral.extend; from spectral.extend import Plugin, Command, Scope"
    probe = subprocess.run(
        [sys.executable, "-c", f"import sys; {code}; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = {name.split(".")[0] for name in probe.stdout.split()}
    assert loaded & {"pydantic", "asyncpg", "aiokafka", "fastapi", "mcp", "contracts"} == set()


def test_every_stable_name_resolves_lazily() -> None:
    for name in sorted(STABLE):
        assert getattr(spectral.extend, name) is not None
