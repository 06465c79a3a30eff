"""Reproduce the numbers in docs/evaluate.md: the brief's three runs and their comparison.

    .venv/bin/python examples/sake/reproduce.py [OUT_DIR]

Starts two throwaway servers on loopback (one plain, one with a reranker configured — the fake,
lexical provider from tests/fake_reranker.py), imports examples/sake/corpus.jsonl into each over
POST /import, then runs the real `taguru evaluate` command line:

  1. baseline                  sources/search, truncated client-side at the budget
  2. deterministic assembly    POST /contexts/sake/evidence, no reranker configured (the gate)
  3. assembly with a reranker  --rerank fake-lexical against the reranker-configured server

and `taguru evaluate compare` for 1→2 and 2→3. Everything it prints is the commands' own output,
with the servers' ephemeral ports replaced by 127.0.0.1:8248 so that reruns diff cleanly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
from pathlib import Path

import structlog
from aiohttp import ClientSession, web

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fake_reranker import FakeReranker  # noqa: E402

from taguru_server.server.app import build_app  # noqa: E402
from taguru_server.server.config import load_settings  # noqa: E402
from taguru_server.server.providers.reranker import RerankSettings  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent
BUDGET = ["--max-items", "40", "--max-bytes", "65536", "--max-tokens", "4000"]
MODEL = "fake-lexical"
SHOWN = "127.0.0.1:8248"


async def _site(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


async def _import(url: str) -> None:
    async with ClientSession() as s:
        async with s.post(
            url + "/import",
            data=(EXAMPLE / "corpus.jsonl").read_bytes(),
            headers={"Content-Type": "application/x-ndjson"},
        ) as resp:
            assert resp.status == 200, await resp.text()


async def _taguru(out_dir: Path, ports: dict[str, str], *argv: str) -> int:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "taguru_server.cli",
        *argv,
        cwd=out_dir,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    output, _ = await proc.communicate()
    text = output.decode("utf-8")
    shown = " ".join(argv)
    for real in ports.values():
        text, shown = text.replace(real, SHOWN), shown.replace(real, SHOWN)
    shown = shown.replace(str(EXAMPLE) + "/", "examples/sake/")
    text = text.replace(str(EXAMPLE) + "/", "examples/sake/")
    print(f"$ taguru {shown}\n{text}(exit {proc.returncode})\n", flush=True)
    return proc.returncode or 0


def _table(out_dir: Path) -> None:
    runs = {
        name: json.loads((out_dir / f"{name}.json").read_text(encoding="utf-8"))
        for name in ("baseline", "assembly", "assembly-reranked")
    }
    rows = [
        "recall.recall_at_k",
        "recall.mrr",
        "recall.ndcg",
        "citations.recall",
        "citations.locator_validity",
        "diversity.sources",
        "coverage.concepts",
        "coverage.labels",
        "coverage.associations",
        "budget.items_used",
        "budget.tokens_used",
        "budget.omitted_rate",
        "rerank.ran",
    ]
    print("| metric | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))
    for m in rows:
        cells = []
        for doc in runs.values():
            v = doc["metrics"][m]
            x = v.get("mean") if doc["definitions"][m]["statistic"] == "distribution" else v.get("value")
            cells.append("—" if x is None else f"{x:.4f} (n={v['n']})")
        print(f"| `{m}` | " + " | ".join(cells) + " |")


async def main(out_dir: Path) -> int:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))  # quiet servers
    out_dir.mkdir(parents=True, exist_ok=True)
    fake = FakeReranker("ok")
    fake_runner, fake_url = await _site(fake.app())
    with tempfile.TemporaryDirectory() as data:
        plain = build_app(load_settings({"TAGURU_DATA_DIR": f"{data}/plain"}))
        reranking = build_app(
            load_settings({"TAGURU_DATA_DIR": f"{data}/rerank"}),
            rerank=RerankSettings(fake_url + "/rerank", MODEL, None, 5),
        )
        plain_runner, plain_url = await _site(plain)
        rerank_runner, rerank_url = await _site(reranking)
        try:
            await _import(plain_url)
            await _import(rerank_url)
            ports = {"plain": plain_url.removeprefix("http://"), "rerank": rerank_url.removeprefix("http://")}
            ev, th = str(EXAMPLE / "eval.jsonl"), str(EXAMPLE / "thresholds.json")
            await _taguru(
                out_dir,
                ports,
                "evaluate",
                "--eval",
                ev,
                "--context",
                "sake",
                "--url",
                plain_url,
                *BUDGET,
                "--out",
                "baseline.json",
            )
            await _taguru(
                out_dir,
                ports,
                "evaluate",
                "--eval",
                ev,
                "--context",
                "sake",
                "--url",
                plain_url,
                "--assembly",
                *BUDGET,
                "--thresholds",
                th,
                "--out",
                "assembly.json",
            )
            await _taguru(
                out_dir,
                ports,
                "evaluate",
                "--eval",
                ev,
                "--context",
                "sake",
                "--url",
                rerank_url,
                "--assembly",
                *BUDGET,
                "--rerank",
                MODEL,
                "--out",
                "assembly-reranked.json",
            )
            await _taguru(out_dir, ports, "evaluate", "compare", "baseline.json", "assembly.json")
            await _taguru(
                out_dir,
                ports,
                "evaluate",
                "compare",
                "assembly.json",
                "assembly-reranked.json",
                "--out",
                "changes-reranked.jsonl",
            )
            await _taguru(
                out_dir,
                ports,
                "evaluate",
                "--eval",
                ev,
                "--context",
                "sake",
                "--url",
                plain_url,
                *BUDGET,
                "--thresholds",
                th,
                "--out",
                "baseline-gated.json",
            )
        finally:
            await plain_runner.cleanup()
            await rerank_runner.cleanup()
            await fake_runner.cleanup()
    print(f"reranker provider calls: {fake.hits}\n")
    _table(out_dir)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "evaluate-out").resolve())))
