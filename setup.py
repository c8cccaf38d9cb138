"""Package discovery only; everything else is declared in pyproject.toml.

pyproject.toml cannot both *find* packages and *add* one whose folder is named differently: the
top-level schemas/ folder (migrations, event schemas, test vectors) ships as the resource package
``spectral_schemas`` (see ``[tool.setuptools.package-dir]`` and ``package-data``).

Folders that hold only data (templates, static files, the migrations) are namespace packages, so
they are discovered and listed like any other package and their files ship as package data.
"""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["spectral*", "contracts*", "producers*", "consumers*"]),
        "spectral_schemas",
        *(f"spectral_schemas.{p}" for p in find_namespace_packages(where="schemas")),
    ]
)
