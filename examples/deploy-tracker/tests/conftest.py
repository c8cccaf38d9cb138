"""The example's tests run against the real local stack through spectral's pytest plugin."""

pytest_plugins = ["spectral.testing"]
