"""A plugin module whose import fails (discovery must name it, not crash)."""

raise RuntimeError("the plugin's own import fails")
