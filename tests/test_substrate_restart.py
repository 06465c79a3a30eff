"""Every write path survives a restart: a second app over the same data dir answers exactly as the first."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Client, start_client
from substrate_support import assert_ok, ctx_path, make_context

pytestmark = pytest.mark.anyio


def a(s: str, label: str, o: str, w: float, **kw: Any) -> dict[str, Any]:
    return {"subject": s, "label": label, "object": o, "weight": w, **kw}


async def write_everything(client: Client) -> None:
    await make_context(client, "keep", {"description": "kept", "dice_floor": 0.4})
    await make_context(client, "gone")
    await make_context(client, "a/b")
    ok = assert_ok
    ok(
        await client.call(
            "POST",
            ctx_path("keep", "associations"),
            [
                a("alpha", "rel", "beta", 2.0, source="d1", paragraph=1),
                a("alpha", "rel", "beta", 1.0),
                a("beta", "near", "gamma", -3.0, source="d2"),
                a("gamma", "rel", "alpha", 1.0, source="d1"),
                a("x", "rel", "y", 4.0, source="d3"),
            ],
        )
    )
    ok(
        await client.call(
            "POST",
            ctx_path("keep", "sources"),
            {
                "passages": {"d1": "zero\n\none two\n\nthree", "d2": "gamma near beta", "d4": "only text"},
                "questions": {"d1": [{"paragraph": 1, "question": "how many?"}]},
                "sections": {"d1": [{"paragraph": 1, "section": "S"}]},
                "locators": {"d1": [{"paragraph": 2, "locator": {"kind": "page", "value": "9"}}]},
                "tags": {"d1": ["t"]},
                "dates": {"d1": 123},
            },
        )
    )
    ok(await client.call("POST", ctx_path("keep", "sources"), {"passages": {"d4": "replaced text"}}))
    ok(
        await client.call(
            "POST", ctx_path("keep", "aliases"), {"concepts": {"Alpha": "alpha", "B": "beta"}, "labels": {"R": "rel"}}
        )
    )
    ok(await client.call("DELETE", ctx_path("keep", "aliases"), {"concepts": ["B"]}))
    ok(
        await client.call(
            "POST", ctx_path("keep", "associations/retract"), {"subject": "x", "label": "rel", "object": "y"}
        )
    )
    ok(await client.call("POST", ctx_path("keep", "sources/retract"), {"source": "d2"}))
    ok(await client.call("PATCH", ctx_path("keep"), {"pinned": True}))
    ok(await client.call("POST", ctx_path("gone", "associations"), [a("q", "r", "s", 1.0)]))
    ok(await client.call("DELETE", ctx_path("gone")))
    ok(await client.call("POST", ctx_path("a/b", "associations"), [a("p", "r", "q", 1.0)]))
    text = (
        '{"taguru_batch":1,"context":"imported","source":"s","create":{"pinned":true}}\n'
        '{"passage":"imported text"}\n{"subject":"i","label":"r","object":"j","weight":1}\n'
        '{"alias":"I","canonical":"i","kind":"concept"}\n'
    )
    ok(await client.call("POST", "/import", raw=text, content_type=None))


async def observe(client: Client) -> dict[str, Any]:
    out: dict[str, Any] = {}
    listing = assert_ok(await client.call("GET", "/contexts"))
    out["contexts"] = [{k: v for k, v in c.items() if k != "usage"} for c in listing["contexts"]]
    for name in ("keep", "a/b", "imported"):
        for tail in ("labels", "aliases", "sources"):
            out[(name, tail)] = assert_ok(await client.call("GET", ctx_path(name, tail)))
        for tail, body in (
            ("query", {"subject": ["alpha", "beta", "gamma", "x", "p", "i"]}),
            ("recall", {"cue": "rel"}),
            ("activate", {"origins": ["alpha", "I"]}),
            ("resolve", {"cue": "alph"}),
            ("resolve_label", {"cue": "R"}),
            ("describe", {"concept": "Alpha"}),
            ("sources/search", {"query": "how many two"}),
            ("sources/lookup", {"sources": ["d1", "d2", "d4", "s"]}),
        ):
            out[(name, tail)] = assert_ok(await client.call("POST", ctx_path(name, tail), body))
    for p in range(3):
        out[("cite", p)] = assert_ok(
            await client.call("POST", ctx_path("keep", "citations"), {"source": "d1", "paragraph": p})
        )
    return out


async def test_writes_survive_a_restart(settings_factory) -> None:
    settings = settings_factory()
    server, client, session = await start_client(settings)
    try:
        await write_everything(client)
        before = await observe(client)
    finally:
        await session.close()
        await server.close()
    server, client, session = await start_client(settings)
    try:
        after = await observe(client)
        assert after == before
        # and the restarted store keeps taking writes with the same ids and counters
        assert_ok(await client.call("POST", ctx_path("keep", "associations"), [a("alpha", "rel", "beta", 3.0)]))
        (m,) = [
            m
            for m in assert_ok(
                await client.call("POST", ctx_path("keep", "query"), {"subject": "Alpha", "object": "beta"})
            )["matches"]
        ]
        assert (m["weight"], m["count"]) == (2.0, 3)
    finally:
        await session.close()
        await server.close()


@pytest.mark.anyio
async def test_usage_epochs_are_recorded(client) -> None:
    import time

    before = int(time.time())
    await client.ok("PUT", "/contexts/u", content_type=None)
    entry = (await client.ok("GET", "/contexts/u"))["result"]
    assert entry["usage"]["last_write_epoch"] == 0 and entry["usage"]["last_read_epoch"] == 0
    await client.ok("POST", "/contexts/u/associations", [{"subject": "a", "label": "r", "object": "b", "weight": 1.0}])
    await client.ok("POST", "/contexts/u/recall", {"cue": "a"})
    usage = (await client.ok("GET", "/contexts/u"))["result"]["usage"]
    assert usage["writes"] == 1 and usage["reads"] == 1
    assert usage["last_write_epoch"] >= before and usage["last_read_epoch"] >= before
