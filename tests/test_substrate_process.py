"""Process level: a real `taguru serve` killed mid-import keeps whole batches only; offline `taguru import`."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from process_support import PYTHON, ROOT, Server, base_env, cli, free_port

ACK = re.compile(r"(\d+) batch\(es\) acknowledged")

pytestmark = pytest.mark.slow


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


# ----- the crash test ----------------------------------------------------------------------------------

CONTEXT = "crash"
N_BATCHES = 3000
OBJECTS = 4


def batch_lines(i: int) -> list[dict[str, Any]]:
    src = f"src-{i:05d}"
    lines: list[dict[str, Any]] = [
        {"taguru_batch": 1, "context": CONTEXT, "source": src, "create": {"description": "crash test"}},
        {"passage": f"Passage number {i}.\n\nSecond paragraph of {i}."},
        {"subject": f"s{i}", "label": "in", "object": "hub", "weight": 1.0, "paragraph": 0},
    ]
    lines += [
        {"subject": f"s{i}", "label": "rel", "object": f"o{i}-{k}", "weight": float(k), "paragraph": 1}
        for k in range(1, OBJECTS + 1)
    ]
    return lines


def expected_edges(i: int) -> dict[tuple[str, str, str], tuple[float, int | None]]:
    out: dict[tuple[str, str, str], tuple[float, int | None]] = {(f"s{i}", "in", "hub"): (1.0, 0)}
    for k in range(1, OBJECTS + 1):
        out[(f"s{i}", "rel", f"o{i}-{k}")] = (float(k), 1)
    return out


def collect(server: Server) -> tuple[set[str], dict[str, str], dict[str, dict[tuple[str, str, str], Any]]]:
    """Every listed source, every passage text, and every edge grouped by its attributing source."""
    listed: list[str] = []
    after = None
    while True:
        q = "?limit=1000" + (f"&after={after}" if after else "")
        page = server.ok("GET", f"/contexts/{CONTEXT}/sources{q}")
        if not page["sources"]:
            break
        listed += page["sources"]
        after = page["sources"][-1]
    texts: dict[str, str] = {}
    for k in range(0, len(listed), 1000):
        found = server.ok("POST", f"/contexts/{CONTEXT}/sources/lookup", {"sources": listed[k : k + 1000]})
        assert found["missing"] == []
        texts.update(found["passages"])
    edges: dict[str, dict[tuple[str, str, str], Any]] = {}
    body: dict[str, Any] = {"label": ["in", "rel"], "limit": 1000}
    total = None
    seen = 0
    while True:
        page = server.ok("POST", f"/contexts/{CONTEXT}/query", body)
        total = page["total"] if total is None else total
        if not page["matches"]:
            break
        for m in page["matches"]:
            seen += 1
            assert m["count"] == 1 and len(m["attributions"]) == 1, m
            (att,) = m["attributions"]
            key = (m["subject"], m["label"], m["object"])
            assert key not in edges.get(att["source"], {})
            edges.setdefault(att["source"], {})[key] = (m["weight"], att)
        last = page["matches"][-1]
        body["after"] = {k: last[k] for k in ("weight", "subject", "label", "object")}
    assert seen == total
    return set(listed), texts, edges


def check_whole_batches(server: Server, must_have: int, reimported: int = 0) -> int:
    """Every source is all there or not there at all, the present ones are a prefix; returns how many.

    `reimported` batches were applied twice: each second pass retracted the source (graph +1 as it was known
    to the graph, passages +1 for the removed passage) before storing it again.
    """
    listed, texts, edges = collect(server)
    assert listed == set(edges), "a passage without its associations, or associations without their passage"
    present = sorted(int(s.split("-")[1]) for s in listed)
    assert present == list(range(len(present))), "the landed batches are not a prefix of the stream"
    assert len(present) >= must_have, (len(present), must_have)
    for i in present:
        src = f"src-{i:05d}"
        assert texts[src] == f"Passage number {i}.\n\nSecond paragraph of {i}."
        got = {key: (w, att["paragraph"]) for key, (w, att) in edges[src].items()}
        assert got == expected_edges(i), src
        for _w, att in edges[src].values():
            assert (att["weight"], att["count"]) == (_w, 1)
    entry = server.ok("GET", f"/contexts/{CONTEXT}")
    n = len(present)
    stats = entry["stats"]
    assert stats["associations"] == n * (OBJECTS + 1) and stats["dead_edges"] == 0
    assert stats["sources"] == n and stats["concepts"] == n * (OBJECTS + 1) + 1 and stats["labels"] == 2
    # the counters committed with the data they count
    assert entry["revision"] == {
        "graph": (n + reimported) * (OBJECTS + 1) + reimported,
        "passages": n + 2 * reimported,
        "config": 0,
    }
    return n


def test_sigkill_mid_import_keeps_whole_acknowledged_batches(tmp_path: Path, servers: list[Server]) -> None:
    data = tmp_path / "data"
    stream = tmp_path / "stream.jsonl"
    with open(stream, "w", encoding="utf-8") as f:
        for i in range(N_BATCHES):
            for line in batch_lines(i):
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
    # a small body cap forces the CLI to halve its 4 MiB budget and send many chunks
    first = Server(data, tmp_path / "server1.log", TAGURU_MAX_BODY_BYTES="32768")
    servers.append(first)
    proc = subprocess.Popen(
        [PYTHON, "-m", "taguru_server.cli", "import", "--url", first.url, str(stream)],
        cwd=ROOT,
        env=base_env(data),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    acked = 0
    killed = False
    for line in proc.stderr:
        lines.append(line)
        m = ACK.search(line)
        if m:
            acked = max(acked, int(m.group(1)))
            if not killed:
                first.kill()
                killed = True
    proc.wait(timeout=120)
    stderr = "".join(lines)
    assert killed, stderr
    assert proc.returncode == 1, stderr
    assert 1 <= acked < N_BATCHES, stderr
    assert "Traceback" not in stderr, stderr

    second = Server(data, tmp_path / "server2.log", TAGURU_MAX_BODY_BYTES="32768")
    servers.append(second)
    landed = check_whole_batches(second, must_have=acked)
    assert landed < N_BATCHES
    # re-sending the whole stream is exact: every batch replaces its own source
    done = subprocess.run(
        [PYTHON, "-m", "taguru_server.cli", "import", "--url", second.url, str(stream)],
        cwd=ROOT,
        env=base_env(data),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert check_whole_batches(second, must_have=N_BATCHES, reimported=landed) == N_BATCHES


def test_cli_url_mode_reports_a_batch_over_the_cap(tmp_path: Path, servers: list[Server]) -> None:
    data = tmp_path / "data"
    server = Server(data, tmp_path / "server.log", TAGURU_MAX_BODY_BYTES="2048")
    servers.append(server)
    f = tmp_path / "big.jsonl"
    f.write_text(
        json.dumps({"taguru_batch": 1, "context": "big", "source": "huge.md", "create": {}})
        + "\n"
        + json.dumps({"passage": "x" * 5000})
        + "\n",
        encoding="utf-8",
    )
    result = cli("import", "--json", "--url", server.url, str(f), env=base_env(data))
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["batches"] == [] and doc["dry_run"] is False
    assert "'huge.md'" in doc["error"] and "body cap" in doc["error"]
    assert "x" * 50 not in result.stdout + result.stderr
    # a server refusal comes back as the error, exit 1
    g = tmp_path / "nocreate.jsonl"
    g.write_text(json.dumps({"taguru_batch": 1, "context": "absent", "source": "s"}) + "\n", encoding="utf-8")
    result = cli("import", "--json", "--url", server.url, str(g), env=base_env(data))
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"] == "context 'absent' does not exist and the batch brought no create block"
    # the server being gone is a failure message, not a traceback
    server.stop()
    servers.remove(server)
    result = cli("import", "--url", server.url, str(g), env=base_env(data))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "cannot reach the server" in result.stderr


def test_cli_url_mode_with_auth(tmp_path: Path, servers: list[Server]) -> None:
    data = tmp_path / "data"
    server = Server(
        data, tmp_path / "server.log", TAGURU_API_TOKENS="ops:tok-ops,ci:tok-ci", TAGURU_KEY_SCOPES='{"ci":"read"}'
    )
    servers.append(server)
    f = write_stream(
        tmp_path / "s.jsonl",
        ("authd", "one.md", [{"passage": "p"}, edge("a", "b")]),
        ("authd", "two.md", [edge("b", "c")]),
    )
    env = base_env(data)
    # the first entry of TAGURU_API_TOKENS is used
    result = cli(
        "import", "--json", "--url", server.url, str(f), env=dict(env, TAGURU_API_TOKENS="ops:tok-ops,ci:tok-ci")
    )
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["dry_run"] is False and [b["source"] for b in doc["batches"]] == ["one.md", "two.md"]
    result = cli(
        "import", "--json", "--dry-run", "--url", server.url, str(f), env=dict(env, TAGURU_API_TOKEN="tok-ops")
    )
    assert result.returncode == 0 and json.loads(result.stdout)["dry_run"] is True
    assert [b["retracted"] for b in json.loads(result.stdout)["batches"]] == [1, 1]
    result = cli("import", "--json", "--url", server.url, str(f), env=dict(env, TAGURU_API_TOKENS="ci:tok-ci"))
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"] == "key 'ci' has role 'read', but POST /import needs 'admin'"
    result = cli("import", "--url", server.url, str(f), env=dict(env, TAGURU_API_TOKEN="wrong"))
    assert result.returncode == 1
    assert "missing or invalid bearer token" in result.stderr and "wrong" not in result.stderr


# ----- offline `taguru import` -------------------------------------------------------------------------


def write_stream(path: Path, *batches: tuple[str, str, list[dict[str, Any]]], create: bool = True) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for context, source, ops in batches:
            header: dict[str, Any] = {"taguru_batch": 1, "context": context, "source": source}
            if create:
                header["create"] = {"description": "offline"}
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for op in ops:
                f.write(json.dumps(op, ensure_ascii=False) + "\n")
    return path


def edge(s: str, o: str, w: float = 1.0) -> dict[str, Any]:
    return {"subject": s, "label": "r", "object": o, "weight": w}


def read_store(data: Path) -> dict[str, dict[str, Any]]:
    """The landed contexts, read straight from the data dir while no server holds it."""
    from taguru_server.server.wire.render.contexts import stats_out
    from taguru_server.store.persist.registry import Registry
    from taguru_server.store.persist.sqlite import SqlitePersistence

    registry = Registry(SqlitePersistence(data))
    try:
        out = {}
        for name in registry.names():
            ctx = registry.get(name)
            assert ctx is not None
            out[name] = {"stats": stats_out(ctx.stats()), "passages": sorted(ctx.sources[s] for s in ctx.passages)}
        return out
    finally:
        registry.close()


@pytest.mark.sqlite_only  # the data-dir lock guards the SQLite store only
def test_offline_import_cli(tmp_path: Path, servers: list[Server]) -> None:
    data = tmp_path / "data"
    env = base_env(data)
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_stream(inputs / "b.jsonl", ("off", "two.md", [edge("c", "d")]))
    write_stream(
        inputs / "a.jsonl",
        ("off", "one.md", [{"passage": "p0\n\np1"}, edge("a", "b")]),
        ("other", "x.md", [edge("x", "y", 2.0)]),
    )
    (inputs / "ignored.txt").write_text("not a stream", encoding="utf-8")

    # a dry run over a directory: sorted *.jsonl files, predicted outcomes, nothing written
    result = cli("import", "--dry-run", "--json", str(inputs), env=env)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"dry_run", "batches"} and doc["dry_run"] is True
    assert [(b["context"], b["source"], b["created"]) for b in doc["batches"]] == [
        ("off", "one.md", True),
        ("other", "x.md", True),
        ("off", "two.md", False),
    ]
    assert read_store(data) == {}

    result = cli("import", "--json", str(inputs), env=env)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"dry_run", "batches"} and doc["dry_run"] is False
    assert [(b["source"], b["associations"], b["passage_stored"]) for b in doc["batches"]] == [
        ("one.md", 1, True),
        ("x.md", 1, False),
        ("two.md", 1, False),
    ]
    assert set(doc["batches"][0]) == {
        "context",
        "source",
        "created",
        "retracted",
        "associations",
        "aliases",
        "passage_stored",
        "passage_dropped",
        "questions_stored",
        "questions_dropped",
        "sections_stored",
        "sections_dropped",
        "locators_stored",
        "locators_dropped",
        "association_paragraphs_dropped",
        "schema_violations",
    }
    landed = read_store(data)
    assert sorted(landed) == ["off", "other"]
    assert landed["off"]["stats"]["associations"] == 2 and landed["off"]["passages"] == ["one.md"]

    # validation: one bad file refuses everything
    bad = write_stream(tmp_path / "bad.jsonl", ("off", "three.md", [edge("e", "f", 1e7)]))
    good = write_stream(tmp_path / "good.jsonl", ("off", "four.md", [edge("g", "h")]))
    result = cli("import", "--json", str(good), str(bad), env=env)
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "dry_run": False,
        "batches": [],
        "error": "1 of 2 file(s) refused during validation; nothing was applied",
    }
    result = cli("import", str(good), str(bad), str(tmp_path / "missing.jsonl"), env=env)
    assert result.returncode == 1
    assert "2 of 3 file(s) refused during validation; nothing was applied" in result.stderr
    assert "line 2: weight 10000000 is outside the accepted range" in result.stderr
    # a number past the f64 range is a refusal too, not a crash
    (tmp_path / "inf.jsonl").write_text(
        '{"taguru_batch":1,"context":"off","source":"inf"}\n{"subject":"a","label":"r","object":"b","weight":1e400}\n',
        encoding="utf-8",
    )
    result = cli("import", str(tmp_path / "inf.jsonl"), env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "1 of 1 file(s) refused during validation; nothing was applied" in result.stderr
    assert read_store(data) == landed

    # a refusal while applying exits 1 and names the reason
    nocreate = write_stream(tmp_path / "nocreate.jsonl", ("absent", "s", [edge("a", "b")]), create=False)
    result = cli("import", "--json", str(nocreate), env=env)
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"] == "context 'absent' does not exist and the batch brought no create block"

    # usage errors exit 2
    assert cli("import", env=env).returncode == 2
    assert cli("import", "--no-embed", "--url", "http://127.0.0.1:9", str(good), env=env).returncode == 2
    empty = tmp_path / "empty-dir"
    empty.mkdir()
    assert cli("import", str(empty), env=env).returncode == 2
    assert cli("import", str(good), env=dict(env, TAGURU_API_TOKENS="a@b:t")).returncode == 2
    assert cli("bogus", env=env).returncode == 2

    # the data-dir lock refuses while a server holds the directory
    server = Server(data, tmp_path / "server.log")
    servers.append(server)
    result = cli("import", str(good), env=env)
    assert result.returncode == 1 and "in use by another process" in result.stderr
    result = cli("import", "--json", str(good), env=env)
    assert result.returncode == 1
    doc = json.loads(result.stdout)
    assert doc["batches"] == [] and "in use by another process" in doc["error"]
    # the server sees what the offline import landed
    assert server.ok("GET", "/contexts/off")["stats"]["associations"] == 2
    server.stop()
    servers.remove(server)
    result = cli("import", str(good), env=env)
    assert result.returncode == 0, result.stderr
    assert read_store(data)["off"]["stats"]["associations"] == 3


def test_serve_refuses_bad_configuration(tmp_path: Path) -> None:
    for extra in (
        {"TAGURU_API_TOKENS": "a@b:t"},
        {"TAGURU_API_TOKENS": "a:t", "TAGURU_KEY_SCOPES": '{"z":"read"}'},
        {"TAGURU_API_TOKENS": "a:t", "TAGURU_KEY_SCOPES": '{"a":{"role":"read","contexts":[]}}'},
    ):
        env = base_env(tmp_path / "data", TAGURU_ADDR=f"127.0.0.1:{free_port()}", **extra)
        result = cli("serve", env=dict(env, TAGURU_LOG_FORMAT="console"))
        assert result.returncode == 2
        assert result.stderr.startswith("taguru: configuration refused: "), result.stderr
        # under the json log format (the default off a terminal) the same refusal is one JSON object
        result = cli("serve", env=dict(env, TAGURU_LOG_FORMAT="json"))
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        refused = json.loads(lines[0])
        assert refused["event"] == "config.refused" and refused["error"].startswith("configuration refused: ")


@pytest.mark.sqlite_only  # the data-dir lock guards the SQLite store only
def test_second_server_on_the_same_data_dir_is_refused(tmp_path: Path, servers: list[Server]) -> None:
    data = tmp_path / "data"
    servers.append(Server(data, tmp_path / "server.log"))
    result = cli("serve", env=base_env(data, TAGURU_ADDR=f"127.0.0.1:{free_port()}"))
    assert result.returncode == 1 and "in use by another process" in result.stderr
