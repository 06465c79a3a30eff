"""Fail when a function's cyclomatic complexity (radon) is above the ceiling: complexity.py MAX DIR..."""

from __future__ import annotations

import sys
from pathlib import Path

from radon.complexity import cc_visit
from radon.visitors import Class


def main(argv: list[str]) -> int:
    ceiling, folders = int(argv[0]), argv[1:]
    over = []
    for folder in folders:
        for path in sorted(Path(folder).rglob("*.py")):
            for block in cc_visit(path.read_text()):
                blocks = block.methods if isinstance(block, Class) else [block]
                for fn in blocks:
                    if fn.complexity > ceiling:
                        over.append(f"{path}:{fn.lineno} {fn.name} {fn.complexity}")
    for line in over:
        print(f"complexity above {ceiling}: {line}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
