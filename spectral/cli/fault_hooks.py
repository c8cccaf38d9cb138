"""Test-only fault hooks of `spectral outbox relay` (tests/faults), in a settings section no
plugin declares, so no reference lists them: nothing but a fault test should ever set them.
Their own module, so `spectral outbox --help` does not load pydantic."""

from __future__ import annotations

from spectral.settings import PluginSettings


class RelayFaultHooks(PluginSettings):
    """Test-only fault hooks (tests/faults), in a section no plugin declares, so no reference
    lists them: nothing but a fault test should ever set them."""

    relay_crash_after_publish: bool = False
    """``SPECTRAL_RELAY_CRASH_AFTER_PUBLISH=1``: exit right after Kafka acknowledged the first
    batch and before marking it published."""
