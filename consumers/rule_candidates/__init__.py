"""The triage inbox (ADR-057): the ``rule-candidates`` deployment projects failure-cluster
snapshots into it; operators triage it through the CLI, the HTTP API, the console and MCP.
The feature plugs into spectral through plugin.py."""
