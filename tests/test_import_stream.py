"""`taguru import --url` reads its files in stretches of whole batches: same refusals, same batches,
and client memory that does not grow with the file."""

from __future__ import annotations

import argparse
import json
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from taguru_server.cli import import_command as cli_main
from taguru_server.cli.stream_import import Budget, stretches, validate
from taguru_server.store.transfer.importer import ParseError, parse_stream


def _batch(i: int, rng: random.Random, paragraphs: int = 3) -> list[str]:
    words = ["酒蔵", "杜氏", "river", "taguru_batch", "山田錦", "water", "蔵元"]
    text = "\n\n".join(" ".join(rng.choice(words) for _ in range(8)) for _ in range(paragraphs))
    lines = [json.dumps({"taguru_batch": 1, "context": "c", "source": f"s{i}"}, ensure_ascii=False)]
    lines.append(json.dumps({"passage": text}, ensure_ascii=False))
    for p in range(paragraphs):
        assoc = {"subject": f"a{i}", "label": "taguru_batch", "object": f"b{p}", "weight": 1.0, "paragraph": p}
        lines.append(json.dumps(assoc))
    if rng.random() < 0.3:
        lines.append("")  # a blank line between batches
    return lines


def _write(path: Path, lines: list[str], bom: bool = False) -> Path:
    path.write_bytes(("\ufeff" if bom else "").encode() + ("\n".join(lines) + "\n").encode())
    return path


def _whole(path: Path) -> list[Any] | str:
    try:
        return parse_stream(path.read_bytes())
    except (ParseError, UnicodeDecodeError) as exc:
        return str(exc)


def _streamed(path: Path, budget: int) -> list[Any] | str:
    try:
        validate(path, budget)
    except (ParseError, UnicodeDecodeError) as exc:
        return str(exc)
    out: list[Any] = []
    for stretch in stretches(path, Budget(budget)):
        out.extend(parse_stream("".join(stretch.pieces)))
    return out


def _key(batches: list[Any]) -> list[Any]:
    return [(b.context, b.source, b.associations, b.passage, b.aliases) for b in batches]


@pytest.mark.parametrize("seed", range(12))
def test_stretches_send_the_batches_parse_stream_reads(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = ["", ""] if rng.random() < 0.5 else []
    for i in range(rng.randint(1, 60)):
        lines.extend(_batch(i, rng, rng.randint(1, 4)))
    path = _write(tmp_path / "s.jsonl", lines, bom=rng.random() < 0.3)
    budget = rng.choice([1, 200, 700, 5000, 10**7])
    whole, streamed = _whole(path), _streamed(path, budget)
    assert isinstance(whole, list) and isinstance(streamed, list)
    assert _key(streamed) == _key(whole)
    for stretch in stretches(path, Budget(budget)):
        size = sum(len(p.encode()) for p in stretch.pieces)
        assert size <= budget or len(stretch.pieces) == 1


@pytest.mark.parametrize("seed", range(16))
def test_streamed_validation_refuses_as_the_whole_file(tmp_path: Path, seed: int) -> None:
    rng = random.Random(100 + seed)
    lines: list[str] = []
    for i in range(rng.randint(2, 30)):
        lines.extend(_batch(i, rng))
    broken = list(lines)
    at = rng.randrange(1, len(broken))
    fault = seed % 5
    if fault == 0:
        broken.insert(at, '{"subject": "x"')  # not JSON
    elif fault == 1:
        broken.insert(at, json.dumps({"taguru_batch": 1, "context": "c", "source": "s0"}))  # a source twice
    elif fault == 2:
        broken.append(json.dumps({"taguru_batch": 1, "context": "c", "source": "late"}))
        broken.append(json.dumps({"subject": "a", "label": "l", "object": "b", "weight": 1.0, "paragraph": 0}))
        broken.insert(at, '{"subject": "x"')  # ...and an earlier syntax error: the first refusal wins
    elif fault == 3:
        broken = []  # an empty stream
    path = _write(tmp_path / "b.jsonl", broken)
    if fault == 4:
        raw = path.read_bytes()
        cut = raw.index(b"\n", len(raw) // 2) + 1
        path.write_bytes(raw[:cut] + b'{"subject": "\xff"}\n' + raw[cut:])  # invalid UTF-8 mid-file
    for budget in (1, 300, 10**7):
        assert _streamed(path, budget) == _whole(path)
        assert isinstance(_whole(path), str)


def _big_file(path: Path, paragraphs: int) -> Path:
    rng = random.Random(3)
    with path.open("w", encoding="utf-8") as f:
        for i in range(paragraphs // 10):
            f.write("\n".join(_batch(i, rng, 10)) + "\n")
    return path


def _peak_sending(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """Client peak traced memory of `taguru import --url` with the HTTP POST stubbed out."""
    sent = [0]
    acks: list[dict[str, Any]] = []

    def fake_post(_client: Any, _path: str, data: bytes) -> tuple[int, Any]:
        sent[0] += len(data)
        return 200, {"result": {"batches": acks}}

    monkeypatch.setattr(cli_main, "_post", fake_post)
    monkeypatch.setattr(cli_main, "CHUNK_BUDGET", 64 * 1024)
    args = argparse.Namespace(url="http://127.0.0.1:9", dry_run=False, json=True, paths=[str(path)], no_embed=False)
    tracemalloc.start()
    try:
        assert cli_main._import_remote(args, [path]) == 0
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, sent[0]


def test_client_memory_stays_flat_as_the_file_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    small = _big_file(tmp_path / "small.jsonl", 10_000)
    large = _big_file(tmp_path / "large.jsonl", 40_000)
    peak_small, sent_small = _peak_sending(small, monkeypatch)
    peak_large, sent_large = _peak_sending(large, monkeypatch)
    capsys.readouterr()
    assert sent_large > 3.5 * sent_small  # every byte of the larger file went out...
    assert large.stat().st_size > 3 * 1024 * 1024
    # ...holding one stretch at a time: what grows is only the set of (context, source) names
    # validation keeps to refuse a source stated twice (here 3,000 more sources, < 250 bytes each)
    extra_sources = (40_000 - 10_000) // 10
    assert peak_large < 1.25 * peak_small + 250 * extra_sources
    assert peak_large < large.stat().st_size / 3


def test_group_records_are_sent_after_the_files_last_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A group line before the first batch, or between batches, reaches the server once, in a request
    of its own after every batch of its file (so each context it names exists by then)."""
    rng = random.Random(5)
    g1 = json.dumps({"taguru_group": 1, "name": "early", "contexts": ["c"]})
    g2 = json.dumps({"taguru_group": 1, "name": "middle", "contexts": ["c"]})
    lines = [g1, *_batch(0, rng), g2, *_batch(1, rng), *_batch(2, rng)]
    path = _write(tmp_path / "groups.jsonl", lines)
    assert len(parse_stream(path.read_bytes()).groups) == 2  # the whole-file parse reads both
    posts: list[str] = []

    def fake_post(_client: Any, _path: str, data: bytes) -> tuple[int, Any]:
        posts.append(data.decode())
        return 200, {"result": {"batches": [{}] * data.decode().count('"taguru_batch": 1')}}

    monkeypatch.setattr(cli_main, "_post", fake_post)
    monkeypatch.setattr(cli_main, "CHUNK_BUDGET", 600)  # a few batches per request
    args = argparse.Namespace(url="http://127.0.0.1:9", dry_run=False, json=True, paths=[str(path)], no_embed=False)
    assert cli_main._import_remote(args, [path]) == 0
    assert len(posts) >= 2
    assert all("taguru_group" not in p for p in posts[:-1])
    assert posts[-1] == f"{g1}\n{g2}\n"
    sent = [b.source for p in posts[:-1] for b in parse_stream(p)]
    assert sent == ["s0", "s1", "s2"]
