"""The quix-streams peers of `make bench` run in a virtual environment of their own, which has
quix-streams and the standard library but not spectral's dependencies, and import their shared
set-up (benchmarks/peers/quix_app.py) through the ``benchmarks.peers`` package: importing the
package must load nothing beyond the standard library."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
before = set(sys.modules)
import benchmarks.peers
loaded = {name.split(".")[0] for name in set(sys.modules) - before}
print(json.dumps(sorted(loaded - set(sys.stdlib_module_names) - {"benchmarks"})))
"""


def test_the_peers_package_imports_nothing_beyond_the_standard_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
