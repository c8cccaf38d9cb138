"""Marks this folder as the resource package ``spectral_schemas`` in the wheel (see
``[tool.setuptools.package-dir]`` in pyproject.toml and ``spectral/resources.py``): the
migrations in ``sql/`` and the event schemas in ``events/`` are read as package resources."""
