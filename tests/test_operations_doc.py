"""docs/operations.md lists every TAGURU_* variable the code reads, in its one table of variables."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages", "store", "server", "evaluate", "cli", "client")
NAME = re.compile(r"TAGURU_[A-Z0-9_]*[A-Z0-9]")


def names_in_code() -> dict[str, str]:
    """Every string literal that is exactly a variable name (how the code reads one), with a file naming it."""
    found: dict[str, str] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                    found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def documented() -> dict[str, list[str]]:
    """The rows of the `## Environment variables` table: name -> [default, meaning]."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and (m := re.fullmatch(r"`(TAGURU_[A-Z0-9_]+)`", cells[0])):
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice"
            rows[m.group(1)] = cells[1:]
    return rows


def test_every_variable_the_code_reads_is_documented() -> None:
    code, docs = names_in_code(), documented()
    missing = {name: where for name, where in code.items() if name not in docs}
    assert not missing, f"add these to the table in docs/operations.md: {missing}"


def test_the_table_names_no_variable_the_code_does_not_read() -> None:
    stale = set(documented()) - set(names_in_code())
    assert not stale, f"documented but read nowhere: {sorted(stale)}"


def test_every_row_has_a_default_and_a_meaning() -> None:
    for name, (default, meaning) in documented().items():
        assert default and meaning, name
