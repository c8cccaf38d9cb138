"""Replay: re-reading a range of a deployment's topics through its handler, offsets resets and
rebuilds, and the guard that keeps them within the dedup horizon."""
