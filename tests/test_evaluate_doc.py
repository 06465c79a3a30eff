"""docs/evaluate.md shows what `taguru evaluate` prints today: the server answers the embedding-status
read, so no run warns about it, the artifact records the status, and the doc's console blocks show no
such warning."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_evaluate_support import evaluate, load, seed, start, write_eval

pytestmark = pytest.mark.anyio
DOC = Path(__file__).resolve().parents[1] / "docs" / "evaluate.md"
WARNING = "could not read embedding status"


async def test_a_run_records_the_embedding_status_without_a_warning(tmp_path: Path) -> None:
    live = await start(tmp_path)
    try:
        await seed(live, "sake", {"a.md": "The brewmaster of Shirasagi is Nonomura."})
        ev = write_eval(tmp_path / "eval.jsonl", [{"case_id": "c1", "query": "brewmaster"}], name="doc")
        out = tmp_path / "evaluation.json"
        rc, _stdout, stderr = await evaluate("--eval", ev, "--context", "sake", "--url", live.url, "--out", str(out))
    finally:
        await live.close()
    assert rc == 0, stderr
    assert WARNING not in stderr
    assert load(out)["corpus"]["embeddings"] == {"provider_model": None}


def test_the_doc_shows_no_stale_warning() -> None:
    blocks = re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    assert blocks and not [b for b in blocks if WARNING in b]
