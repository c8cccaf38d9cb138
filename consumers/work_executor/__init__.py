"""The ``work-executor`` consumer deployment (ADR-035 executed per ADR-0008 and ADR-0023)."""
