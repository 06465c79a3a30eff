"""docs/import-format.md: every example block imports into a fresh store (each on its own, offline through
`taguru import`), and every record kind the importer classifies has an example there."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from taguru_server.cli.main import main
from taguru_server.store.transfer.group_import import _FIELDS as GROUP_FIELDS
from taguru_server.store.transfer.import_records import _KEYS
from taguru_server.store.transfer.schema_records import RECORD_KEYS

DOC = Path(__file__).resolve().parents[1] / "docs" / "import-format.md"
BLOCKS = re.findall(r"```jsonl\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_doc_has_an_example_of_every_record_kind() -> None:
    text = "\n".join(BLOCKS)
    for kind, keys in _KEYS.items():
        assert any(
            all(f'"{k}"' in line for k in keys - {"create", "paragraph", "stored_at"}) for line in text.splitlines()
        ), kind
    for keys in (RECORD_KEYS, GROUP_FIELDS):
        assert any(all(f'"{k}"' in line for k in keys) for line in text.splitlines())


@pytest.mark.sqlite_only
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_each_example_imports(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("TAGURU_")]:
        monkeypatch.delenv(name)
    stream = tmp_path / "example.jsonl"
    stream.write_text(BLOCKS[index], encoding="utf-8")
    assert main(["import", "--data-dir", str(tmp_path / "data"), "--no-embed", str(stream)]) == 0, capsys.readouterr()


@pytest.mark.sqlite_only
def test_a_batch_for_an_absent_context_needs_create(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("TAGURU_")]:
        monkeypatch.delenv(name)
    stream = tmp_path / "x.jsonl"
    stream.write_text('{"taguru_batch": 1, "context": "absent", "source": "s"}\n', encoding="utf-8")
    assert main(["import", "--data-dir", str(tmp_path / "data"), str(stream)]) == 1
