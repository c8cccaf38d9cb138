"""spectral's logging loads structlog without rich (rich, attrs and pygments cost every process
~50 ms at start) and writes the very lines it wrote with rich loaded: the console renderer and
the JSON renderer, exceptions of spectral's loggers and of the standard library's."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

LOG_LINES = """
import io, logging, sys
{before}
from spectral.observability.logging import configure_logging, get_logger
stream = io.StringIO()
configure_logging("INFO", sys.argv[1], stream=stream)
log = get_logger("spectral.test")
log.info("started", consumer="rule-candidates", password="hunter2", count=3)
try:
    raise ValueError("boom: postgresql://app:hunter2@db/x")
except ValueError:
    log.exception("handler failed", key="k1")
    logging.getLogger("aiokafka").exception("fetch failed")
log.warning("stopped", url="postgresql://app:hunter2@db/x")
print("rich loaded:", "rich" in sys.modules)
print(stream.getvalue())
"""


def _lines(fmt: str, *, rich_first: bool) -> tuple[bool, str]:
    """What a fresh process logs in ``fmt``, and whether it loaded rich; with ``rich_first``
    rich is imported before spectral's logging (structlog then loads it, as it always did)."""
    code = LOG_LINES.format(before="import rich.console" if rich_first else "")
    done = subprocess.run(
        [sys.executable, "-c", code, fmt], capture_output=True, text=True, check=True
    )
    flag, _, out = done.stdout.partition("\n")
    # The timestamps differ between the two runs.
    out = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", out)
    return flag == "rich loaded: True", out


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_logging_loads_no_rich_and_writes_the_same_lines(fmt: str) -> None:
    with_rich, expected = _lines(fmt, rich_first=True)
    without_rich, written = _lines(fmt, rich_first=False)
    assert with_rich
    assert not without_rich
    assert written == expected
    assert "Traceback (most recent call last)" in written
    assert "ValueError: boom" in written
    assert "hunter2" not in written
