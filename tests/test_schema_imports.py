"""Context schemas in streams: each import batch judged against its context's schema (strict refuses with the
durable prefix, warn applies and reports, off stays silent, the dry run refuses and counts alike), the reserved
label alias line, `taguru_schema` records (installed after the batches, refused by scope and by a missing
context with their integrity), export's record line and the round trip."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import Client

pytestmark = pytest.mark.anyio


def d(mode: str) -> dict[str, Any]:
    return {
        "schema": 1,
        "mode": mode,
        "closed_labels": False,
        "types": {"Brewery": {"is_a": []}, "Person": {"is_a": []}},
        "relations": {"杜氏": {"domain": ["Brewery"], "range": ["Person"]}},
    }


DV = (
    '{"taguru_batch": 1, "context": "sake", "source": "a.md"}\n'
    '{"subject": "田中", "label": "schema:type", "object": "Person", "weight": 1.0}\n'
    '{"subject": "田中", "label": "杜氏", "object": "青嶺酒造", "weight": 1.0}\n'
)
CLEAN = (
    '{"taguru_batch": 1, "context": "sake", "source": "clean.md"}\n'
    '{"subject": "alpha", "label": "connects_to", "object": "beta", "weight": 1.0}\n'
)
ISSUE = {
    "path": "batches[0].associations[1].subject",
    "kind": "domain",
    "expected": "'田中' typed as one of [Brewery] (or a subtype), for relation '杜氏'",
    "actual": "typed as [Person]",
}
BULLET = (
    "this batch's associations refused 1 issue(s):\n- associations[1].subject: expected '田中' typed as one of "
    "[Brewery] (or a subtype), for relation '杜氏', got typed as [Person]; nothing was applied"
)


async def post(client: Client, stream: str, dry_run: bool = False) -> tuple[int, Any]:
    path = "/import?dry_run=true" if dry_run else "/import"
    status, body, _h = await client.call("POST", path, raw=stream, content_type="application/x-ndjson")
    return status, body


async def sake(client: Client, mode: str | None) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "d"})
    if mode is not None:
        await client.ok("PUT", "/contexts/sake/schema", d(mode))


async def associations(client: Client, name: str = "sake") -> int:
    return int((await client.ok("GET", f"/contexts/{name}"))["result"]["stats"]["associations"])


@pytest.mark.parametrize("dry_run", [False, True])
async def test_strict_refuses_the_batch_and_writes_nothing(client: Client, dry_run: bool) -> None:
    await sake(client, "strict")
    status, body = await post(client, DV, dry_run)
    assert status == 400
    assert body == {
        "status": "error",
        "code": "invalid_argument",
        "error": BULLET,
        "time": body["time"],
        "issues": [ISSUE],
        "issues_total": 1,
        "integrity": "nothing_written",
        "retryable_after_correction": True,
    }
    assert await associations(client) == 0


async def test_strict_on_a_later_batch_keeps_the_durable_prefix(client: Client) -> None:
    await sake(client, "strict")
    status, body = await post(client, CLEAN + DV)
    assert status == 400
    assert body["error"] == (
        "batch 2 of 2 (context 'sake', source 'a.md') refused — the 1 batch(es) before it landed durably; fixing "
        "the stream and re-POSTing it whole is exact (each batch replaces its own source): " + BULLET
    )
    assert body["issues"][0]["path"] == "batches[1].associations[1].subject"
    assert (body["integrity"], body["durable_batches"]) == ("durable_prefix", 1)
    assert await associations(client) == 1


@pytest.mark.parametrize("dry_run", [False, True])
async def test_warn_applies_and_reports(client: Client, dry_run: bool) -> None:
    await sake(client, "warn")
    status, body = await post(client, DV, dry_run)
    assert status == 200, body
    assert body["result"]["batches"][0]["schema_violations"] == 1
    assert (body["issues"], body["schema_violations"]) == ([ISSUE], 1)
    assert list(body)[-2:] == ["issues", "schema_violations"]
    assert "schemas" not in body["result"]
    assert await associations(client) == (0 if dry_run else 2)


async def test_warn_caps_the_envelope_but_not_each_batch(client: Client) -> None:
    await sake(client, "warn")
    lines = []
    for src in ("a.md", "b.md"):
        lines.append(json.dumps({"taguru_batch": 1, "context": "sake", "source": src}))
        for i in range(11):
            lines.append(
                json.dumps({"subject": f"P{src}{i}", "label": "schema:type", "object": "Person", "weight": 1.0})
            )
            lines.append(json.dumps({"subject": f"P{src}{i}", "label": "杜氏", "object": f"O{i}", "weight": 1.0}))
    status, body = await post(client, "\n".join(lines) + "\n")
    assert status == 200
    assert [b["schema_violations"] for b in body["result"]["batches"]] == [11, 11]
    assert (len(body["issues"]), body["schema_violations"]) == (20, 22)
    assert body["issues"][-1]["path"].startswith("batches[1].")


async def test_off_never_reports(client: Client) -> None:
    await sake(client, "off")
    status, body = await post(client, DV)
    assert status == 200 and "issues" not in body and "schema_violations" not in body
    assert body["result"]["batches"][0]["schema_violations"] == 0


async def test_a_type_stated_after_the_fact_still_validates(client: Client) -> None:
    await sake(client, "strict")
    stream = (
        '{"taguru_batch": 1, "context": "sake", "source": "a.md"}\n'
        '{"subject": "田中", "label": "杜氏", "object": "青嶺酒造", "weight": 1.0}\n'
        '{"subject": "田中", "label": "schema:type", "object": "Brewery", "weight": 1.0}\n'
    )
    status, body = await post(client, stream)
    assert status == 200, body
    assert await associations(client) == 2


async def test_a_type_only_the_batch_own_source_keeps_is_about_to_go(client: Client) -> None:
    await sake(client, "strict")
    typed = '{"taguru_batch": 1, "context": "sake", "source": "a.md"}\n'
    typed += '{"subject": "田中", "label": "schema:type", "object": "Person", "weight": 1.0}\n'
    assert (await post(client, typed))[0] == 200
    # the re-import of a.md retracts the Person type first: 田中 is untyped, so the fact passes
    again = '{"taguru_batch": 1, "context": "sake", "source": "a.md"}\n'
    again += '{"subject": "田中", "label": "杜氏", "object": "青嶺酒造", "weight": 1.0}\n'
    assert (await post(client, again))[0] == 200
    # kept alive by another source too: the type stays, and the fact is refused
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [{"subject": "高瀬", "label": "schema:type", "object": "Person", "weight": 1.0}],
    )
    other = '{"taguru_batch": 1, "context": "sake", "source": "b.md"}\n'
    other += '{"subject": "高瀬", "label": "schema:type", "object": "Person", "weight": 1.0}\n'
    assert (await post(client, other))[0] == 200
    fact = '{"taguru_batch": 1, "context": "sake", "source": "b.md"}\n'
    fact += '{"subject": "高瀬", "label": "杜氏", "object": "x", "weight": 1.0}\n'
    status, body = await post(client, fact)
    assert status == 400 and body["issues"][0]["actual"] == "typed as [Person]", body


async def test_a_batch_label_alias_to_the_reserved_label_refuses_in_every_mode(client: Client) -> None:
    await sake(client, None)
    await client.ok(
        "POST",
        "/contexts/sake/associations",
        [{"subject": "某社", "label": "schema:type", "object": "Brewery", "weight": 1.0, "source": "pre.md"}],
    )
    await client.ok("PUT", "/contexts/sake/schema", d("off"))
    stream = '{"taguru_batch": 1, "context": "sake", "source": "a.md"}\n'
    stream += '{"alias": "種別", "canonical": "schema:type", "kind": "label"}\n'
    status, body = await post(client, stream)
    assert status == 409
    assert body == {
        "status": "error",
        "code": "conflict",
        "error": "this batch's label aliases refused 1 issue(s):\n- labels['種別']: expected a canonical spelling "
        "other than the one reserved for type assertions, got resolves to 'schema:type', the relation label "
        "reserved for type assertions (ADR 0009 §6.3) — rename the alias; nothing was applied",
        "time": body["time"],
        "issues": [
            {
                "path": "batches[0].labels['種別']",
                "kind": "conflict",
                "expected": "a canonical spelling other than the one reserved for type assertions",
                "actual": "resolves to 'schema:type', the relation label reserved for type assertions (ADR 0009 §6.3)"
                " — rename the alias",
            }
        ],
        "issues_total": 1,
        "integrity": "nothing_written",
        "retryable_after_correction": True,
    }
    assert await associations(client) == 1


# ----- schema records ---------------------------------------------------------------------

RECORD = (
    '{"taguru_schema": 1, "context": "sake", "mode": "warn", "closed_labels": false, "types": {"Brewery": {}}, '
    '"relations": {"杜氏": {"domain": ["Brewery"], "range": []}}}\n'
)
CREATE = (
    '{"taguru_batch": 1, "context": "sake", "source": "doc.md", "create": {"description": "d"}}\n'
    '{"subject": "alpha", "label": "connects_to", "object": "beta", "weight": 1.0}\n'
)


async def test_a_record_installs_after_the_batches_before_the_groups(client: Client) -> None:
    group = '{"taguru_group": 1, "name": "breweries", "contexts": ["sake"]}\n'
    status, body = await post(client, RECORD + CREATE + group)
    assert status == 200, body
    assert body["result"]["schemas"] == [{"context": "sake", "mode": "warn", "types": 1, "relations": 1}]
    assert body["result"]["groups"][0]["name"] == "breweries"
    assert list(body["result"]) == ["batches", "schemas", "groups"]
    schema = (await client.ok("GET", "/contexts/sake/schema"))["result"]
    assert (schema["mode"], schema["types"]) == ("warn", {"Brewery": {"is_a": []}})
    plain = (await post(client, CLEAN))[1]
    assert "schemas" not in plain["result"]
    dry = (await post(client, RECORD, dry_run=True))[1]
    assert "schemas" not in dry["result"]


async def test_a_record_for_a_missing_context_keeps_the_earlier_batches(client: Client) -> None:
    ghost = RECORD.replace('"sake"', '"ghost"')
    status, body = await post(client, CREATE + ghost)
    assert status == 404
    assert body == {
        "status": "error",
        "code": "no_context",
        "error": "schema record: context 'ghost' does not exist — a schema record's context must already exist "
        "(created by an earlier batch of the same stream, or previously) before its schema can install — nothing "
        "past this point was applied",
        "time": body["time"],
        "issues": [
            {
                "path": "context 'ghost'",
                "kind": "missing",
                "expected": "an earlier batch of this stream (or a previous request) creating it, since a schema "
                "record's context must already exist",
                "actual": "absent",
            }
        ],
        "issues_total": 1,
        "integrity": "durable_prefix",
        "durable_batches": 1,
        "retryable_after_correction": True,
    }
    assert await associations(client) == 1


async def test_an_earlier_record_survives_a_later_refusal(client: Client) -> None:
    await sake(client, None)
    status, body = await post(client, RECORD + RECORD.replace('"sake"', '"ghost"'))
    assert status == 404 and body["integrity"] == "durable_prefix" and "durable_batches" not in body
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"]["mode"] == "warn"
    status, body = await post(client, RECORD.replace('"sake"', '"ghost"'))
    assert status == 404 and body["integrity"] == "nothing_written"


async def test_a_record_refused_while_an_alias_resolves_to_the_reserved_label(client: Client) -> None:
    await sake(client, None)
    await client.ok(
        "POST", "/contexts/sake/associations", [{"subject": "蔵", "label": "schema:type", "object": "B", "weight": 1.0}]
    )
    await client.ok("POST", "/contexts/sake/aliases", {"labels": {"種類": "schema:type"}})
    status, body = await post(client, RECORD)
    assert status == 400
    assert body["error"] == (
        "schema record: context 'sake' label alias '種類' resolves to 'schema:type', the relation label reserved for "
        "type assertions (ADR 0009 §6.3) — rename the alias before installing this schema — nothing past this point "
        "was applied"
    )
    assert body["integrity"] == "nothing_written"


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (
            '{"taguru_schema": 2, "context": "sake", "mode": "warn", "closed_labels": false, "types": {}, '
            '"relations": {}}',
            "line 1: taguru_schema 2 is not a version this taguru reads (it reads 1)",
        ),
        (
            '{"taguru_schema": 1, "context": "'
            + "c" * 65
            + '", "mode": "warn", "closed_labels": false, "types": {}, "relations": {}}',
            "line 1: context of 65 bytes exceeds the 64-byte cap",
        ),
        (
            '{"taguru_schema": 1, "context": "", "mode": "warn", "closed_labels": false, "types": {}, "relations": {}}',
            "line 1: context must not be empty",
        ),
        (
            '{"taguru_schema": 1, "context": "s", "mode": "warn", "closed_labels": false, '
            '"types": {"A": {"is_a": ["A"]}}, "relations": {}}',
            "line 1: type 'A' is_a reaches itself through a cycle",
        ),
    ],
)
async def test_record_parse_refusals(client: Client, line: str, text: str) -> None:
    status, body = await post(client, line + "\n")
    assert (status, body["code"], body["error"]) == (400, "malformed_request", text)
    assert body["integrity"] == "nothing_written"


async def test_record_shape_and_duplicate_refusals(client: Client) -> None:
    status, body = await post(client, RECORD.replace('"mode": "warn"', '"mode": "loud"'))
    assert status == 400 and body["error"].startswith("line 1: not a schema record: ")
    status, body = await post(client, RECORD.replace('"types"', '"typo"'))
    assert status == 400 and body["error"].startswith("line 1: not a schema record: ")
    status, body = await post(client, RECORD + RECORD)
    assert body["error"] == (
        "line 2: context 'sake' schema is already stated by an earlier record of this stream — one record owns one "
        "context's schema"
    )
    status, body = await post(client, RECORD + '{"subject": "a", "label": "b", "object": "c", "weight": 1.0}\n')
    assert status == 400 and body["error"] == "line 2: an op line before any batch header"


# ----- export ------------------------------------------------------------------------------


async def test_export_writes_the_record_first_and_the_round_trip_restores_it(client: Client) -> None:
    await client.ok("PUT", "/contexts/sake", {"description": "酒蔵の知識"})
    await client.ok(
        "PUT",
        "/contexts/sake/schema",
        {**d("warn"), "types": {"Brewery": {"is_a": []}}, "relations": {"杜氏": {"domain": ["Brewery"], "range": []}}},
    )
    raw = await client.session.get(client.base + "/contexts/sake/export")
    text = (await raw.read()).decode("utf-8")
    assert text == (
        '{"taguru_schema":1,"context":"sake","mode":"warn","closed_labels":false,"types":{"Brewery":{"is_a":[]}},'
        '"relations":{"杜氏":{"domain":["Brewery"],"range":[]}}}\n'
        '{"taguru_batch":1,"context":"sake","source":"export:empty","create":{"description":"酒蔵の知識"}}\n'
    )
    before = (await client.ok("GET", "/contexts/sake/schema"))["result"]
    await client.ok("DELETE", "/contexts/sake")
    status, body = await post(client, text)
    assert status == 200, body
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"] == before
    await client.ok("PUT", "/contexts/sake/schema", d("off"))
    raw = await client.session.get(client.base + "/contexts/sake/export")
    assert not (await raw.read()).decode("utf-8").startswith('{"taguru_schema"')


async def test_a_scoped_key_without_a_grant_on_the_record_context_is_refused(settings_factory) -> None:
    from conftest import start_client

    settings = settings_factory(
        TAGURU_API_TOKENS="admin:atok,writer:wtok",
        TAGURU_KEY_SCOPES='{"writer":{"role":"admin","contexts":["sake"]}}',
    )
    server, client, session = await start_client(settings)
    try:
        stream = CREATE + RECORD.replace('"sake"', '"bunko"')
        status, body, _h = await client.call(
            "POST", "/import", raw=stream, content_type="application/x-ndjson", token="wtok"
        )
        assert status == 403
        assert body["error"] == ("key 'writer' has no grant on context 'bunko' (a schema record); nothing was applied")
        status, body, _h = await client.call("GET", "/contexts/sake", token="atok")
        assert status == 404
    finally:
        await session.close()
        await server.close()


# ----- taguru import (offline) ----------------------------------------------------------------


def _offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any, name: str, text: str, *flags: str):
    from pg_support import database_url_for

    from taguru_server.cli.main import main

    data = tmp_path / "data"
    monkeypatch.setenv("TAGURU_DATA_DIR", str(data))
    url = database_url_for(data)
    if url:
        monkeypatch.setenv("TAGURU_DATABASE_URL", url)
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    code = main(["import", "--no-embed", *flags, str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _offline_associations(tmp_path: Path) -> int:
    from pg_support import database_url_for

    from taguru_server.store.persist.backend import open_store
    from taguru_server.store.persist.registry import Registry

    data = tmp_path / "data"
    store = open_store(str(data), database_url_for(data))
    try:
        ctx = Registry(store).get("sake")
        assert ctx is not None
        return sum(ctx.edges.count)
    finally:
        store.close()


def test_offline_import_installs_records_and_judges_later_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    record = json.dumps(
        {"taguru_schema": 1, "context": "sake", **{k: v for k, v in d("strict").items() if k != "schema"}}
    )
    code, out, err = _offline(tmp_path, monkeypatch, capsys, "one.jsonl", CREATE + record + "\n")
    assert code == 0, err
    assert "one.jsonl: context 'sake' schema installed (mode: strict)" in out
    assert "import: 1 of 1 schema record(s) installed" in out
    code, out, err = _offline(tmp_path, monkeypatch, capsys, "two.jsonl", DV + CLEAN)
    assert code == 1
    assert f"taguru: import: two.jsonl: {BULLET}" in err
    assert _offline_associations(tmp_path) == 2  # the first file's fact and the clean batch, not DV's
    code, out, err = _offline(tmp_path, monkeypatch, capsys, "two.jsonl", DV, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["failed_batches"] == [{"context": "sake", "source": "a.md", "error": BULLET}]


def test_offline_warn_applies_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    record = json.dumps(
        {"taguru_schema": 1, "context": "sake", **{k: v for k, v in d("warn").items() if k != "schema"}}
    )
    assert _offline(tmp_path, monkeypatch, capsys, "one.jsonl", CREATE + record + "\n")[0] == 0
    code, out, err = _offline(tmp_path, monkeypatch, capsys, "two.jsonl", DV)
    assert code == 0, err
    assert "schema warnings: 1" in out
    assert _offline_associations(tmp_path) == 3
    code, out, _err = _offline(tmp_path, monkeypatch, capsys, "two.jsonl", DV, "--json")
    assert json.loads(out)["batches"][0]["schema_violations"] == 1


def test_offline_record_failures_do_not_stop_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    ghost = RECORD.replace('"sake"', '"ghost"')
    code, out, err = _offline(tmp_path, monkeypatch, capsys, "one.jsonl", CREATE + ghost + RECORD)
    assert code == 1
    assert (
        "taguru: import: one.jsonl: context 'ghost': does not exist — a schema record's context must already exist"
        in err
    )
    assert "import: 1 of 2 schema record(s) installed" in out


async def test_cli_export_and_import_by_url_carry_the_record(client: Client, tmp_path: Path, capsys: Any) -> None:
    import asyncio

    from taguru_server.cli.main import main

    await client.ok("PUT", "/contexts/sake", {"description": "酒蔵の知識"})
    doc = {**d("warn"), "types": {"Brewery": {"is_a": []}}, "relations": {"杜氏": {"domain": ["Brewery"], "range": []}}}
    await client.ok("PUT", "/contexts/sake/schema", doc)
    out = tmp_path / "sake.jsonl"
    code = await asyncio.to_thread(main, ["export", "sake", "--url", client.base, "--output", str(out)])
    assert code == 0, capsys.readouterr().err
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith('{"taguru_schema":1,"context":"sake","mode":"warn"') and "taguru_batch" in lines[1]
    await client.ok("DELETE", "/contexts/sake")
    code = await asyncio.to_thread(main, ["import", "--url", client.base, str(out)])
    assert code == 0, capsys.readouterr().err
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"] == doc
    await client.ok("PUT", "/contexts/sake/schema", d("warn"))
    code = await asyncio.to_thread(main, ["import", "--url", client.base, _write(tmp_path, "dv.jsonl", DV)])
    assert code == 0 and "1 schema warning(s)" in capsys.readouterr().err


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ----- promote and metrics ---------------------------------------------------------------------


async def _scratch(client: Client) -> None:
    await client.ok("PUT", "/contexts/scratch", {"description": "s"})
    await client.ok(
        "POST",
        "/contexts/scratch/associations",
        [
            {"subject": "田中", "label": "schema:type", "object": "Person", "weight": 1.0, "source": "s:a"},
            {"subject": "田中", "label": "杜氏", "object": "青嶺酒造", "weight": 1.0, "source": "s:a"},
        ],
    )


async def test_promote_is_judged_by_the_destination_schema(client: Client) -> None:
    await _scratch(client)
    await client.ok("PUT", "/contexts/scratch/schema", d("off"))  # the scratch's own schema never travels
    await sake(client, "strict")
    body = {"into": "sake", "sources": ["s:a"], "audit": False}
    status, got, _h = await client.call("POST", "/contexts/scratch/promote", body)
    assert status == 400 and got["integrity"] == "nothing_written", got
    assert got["issues"][0]["path"] == "batches[0].associations[1].subject"
    assert await associations(client) == 0
    status, got, _h = await client.call("POST", "/contexts/scratch/promote?dry_run=true", body)
    assert status == 400
    await client.ok("PUT", "/contexts/sake/schema", d("warn"))
    got = await client.ok("POST", "/contexts/scratch/promote", body)
    assert got["schema_violations"] == 1 and got["issues"][0]["path"].startswith("batches[0].")
    assert got["result"]["batches"][0]["schema_violations"] == 1
    assert await associations(client) == 2
    assert (await client.ok("GET", "/contexts/sake/schema"))["result"]["mode"] == "warn"


def _metric(text: str, name: str) -> float:
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


async def test_schema_checks_are_counted_for_real_writes_only(client: Client) -> None:
    await sake(client, "strict")
    names = [f'taguru_schema_checks_total{{outcome="{o}"}}' for o in ("ok", "warned", "refused")]

    async def counts() -> list[float]:
        raw = await client.session.get(client.base + "/metrics")
        text = (await raw.read()).decode()
        return [_metric(text, n) for n in names]

    assert await counts() == [0.0, 0.0, 0.0]
    assert (await post(client, DV, dry_run=True))[0] == 400
    assert await counts() == [0.0, 0.0, 0.0]
    assert (await post(client, DV))[0] == 400
    assert await counts() == [0.0, 0.0, 1.0]
    await client.ok("PUT", "/contexts/sake/schema", d("warn"))
    assert (await post(client, DV))[0] == 200
    await client.ok(
        "POST", "/contexts/sake/associations", [{"subject": "a", "label": "b", "object": "c", "weight": 1.0}]
    )
    assert await counts() == [1.0, 1.0, 1.0]
    await client.ok("PUT", "/contexts/plain", {"description": "d"})
    await client.ok(
        "POST", "/contexts/plain/associations", [{"subject": "a", "label": "b", "object": "c", "weight": 1.0}]
    )
    assert await counts() == [1.0, 1.0, 1.0]


async def test_per_context_violation_rows(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    await sake(client, "strict")
    await client.ok("PUT", "/contexts/nomi", {"description": "d"})
    await client.ok("PUT", "/contexts/nomi/schema", d("warn"))
    assert (await post(client, DV, dry_run=True))[0] == 400
    assert (await post(client, DV))[0] == 400
    assert (await post(client, DV.replace('"sake"', '"nomi"')))[0] == 200

    async def scrape() -> str:
        raw = await client.session.get(client.base + "/metrics")
        return (await raw.read()).decode()

    assert "taguru_context_schema_violations_total" not in await scrape()
    monkeypatch.setenv("TAGURU_METRICS_PER_CONTEXT", "1")
    text = await scrape()
    assert _metric(text, 'taguru_context_schema_violations_total{context="sake"}') == 1.0
    assert _metric(text, 'taguru_context_schema_violations_total{context="nomi"}') == 1.0
    await client.ok("PUT", "/contexts/empty", {"description": "d"})
    assert _metric(await scrape(), 'taguru_context_schema_violations_total{context="empty"}') == 0.0


async def test_an_export_round_trip_of_a_schemad_context_reproduces_every_read(client: Client) -> None:
    await sake(client, "warn")
    await client.ok("POST", "/contexts/sake/sources", {"passages": {"a.md": "田中は杜氏。\n\n青嶺酒造は蔵。"}})
    facts = [
        {"subject": "田中", "label": "schema:type", "object": "Person", "weight": 1.0, "source": "a.md"},
        {"subject": "青嶺酒造", "label": "schema:type", "object": "Brewery", "weight": 1.0, "source": "a.md"},
        {"subject": "青嶺酒造", "label": "杜氏", "object": "田中", "weight": 2.0, "source": "a.md", "paragraph": 1},
        {"subject": "田中", "label": "杜氏", "object": "x", "weight": 1.0, "source": "b.md"},
    ]
    await client.ok("POST", "/contexts/sake/associations", facts)
    reads = [
        ("GET", "/contexts/sake/schema", None),
        ("POST", "/contexts/sake/describe", {"concept": "青嶺酒造"}),
        ("POST", "/contexts/sake/query", {"label": "杜氏", "subject_types": "Brewery"}),
        ("POST", "/contexts/sake/recall", {"cue": "田中"}),
        ("POST", "/contexts/sake/activate", {"origins": ["青嶺酒造"]}),
        ("GET", "/contexts/sake/labels", None),
        ("POST", "/contexts/sake/schema/audit", None),
    ]

    async def answers() -> list[Any]:
        out = []
        for method, path, body in reads:
            got = await client.ok(method, path, body)
            out.append(got["result"])
        return out

    before = await answers()
    raw = await client.session.get(client.base + "/contexts/sake/export")
    text = (await raw.read()).decode("utf-8")
    await client.ok("DELETE", "/contexts/sake")
    status, body = await post(client, text)
    assert status == 200 and "issues" not in body, body  # the data lands before the schema installs
    assert await answers() == before


def test_a_dry_run_never_creates_the_store_it_previews(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    from pg_support import database_url_for

    if database_url_for(tmp_path / "data"):
        pytest.skip("the SQLite data dir")
    code, _out, err = _offline(tmp_path, monkeypatch, capsys, "one.jsonl", CREATE, "--dry-run")
    assert code == 0, err
    assert not (tmp_path / "data").exists()
