"""Package discovery only; everything else is declared in pyproject.toml.

pyproject.toml cannot both *find* packages and *add* one whose folder is named differently: the
top-level schemas/ folder (migrations, event schemas, test vectors) ships as the resource package
``spectral_schemas`` (see ``[tool.setuptools.package-dir]`` and ``package-data``).
"""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["spectral*", "contracts*", "producers*", "consumers*"]),
        "spectral_schemas",
    ]
)
