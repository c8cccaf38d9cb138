"""``python -m docs.gen [--check]``: write the generated reference pages, or check them."""

from __future__ import annotations

import difflib
import sys

from docs.gen import DOCS, pages


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for relative, render in pages().items():
        path = DOCS / relative
        text = render()
        current = path.read_text("utf-8") if path.exists() else ""
        if current == text:
            continue
        if check:
            stale.append(relative)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    f"docs/{relative} (committed)",
                    f"docs/{relative} (generated)",
                    n=1,
                )
            )
        else:
            path.write_text(text, "utf-8")
            sys.stdout.write(f"wrote docs/{relative}\n")
    if stale:
        sys.stdout.write(
            f"\n{len(stale)} generated page(s) out of date: run `make docs-generate`\n"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
