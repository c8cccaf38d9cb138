"""The ``work-executor`` consumer deployment (ADR-035 executed per ADR-0008 and ADR-0023): it
leases work items, pays for their model calls once, records every prompt and answer in the
ledger and applies the mutations. deployment.py builds it; handler.py is the event flow,
executor.py the per-item flow and the unknown-outcome rule. It plugs into spectral through
plugin.py."""
