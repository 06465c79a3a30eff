"""A `\\ud800` escape decodes to a lone surrogate, which UTF-8 cannot carry: a 400, never a 500."""

from __future__ import annotations

import pytest
from conftest import Client

CASES = [
    ("/contexts/c/associations", b'[{"subject":"\\ud800","label":"l","object":"o","weight":1.0}]'),
    ("/contexts/c/sources", b'{"passages":{"s":"\\ud800"}}'),
    ("/contexts/c/resolve", b'{"cue":"\\ud800"}'),
    ("/contexts/c/evidence", b'{"origins":["\\udfff"]}'),
    ("/contexts/c/sources/search", b'{"query":"x\\uDBFFy"}'),
]


@pytest.mark.anyio
async def test_lone_surrogates_are_malformed_requests(client: Client) -> None:
    await client.ok("PUT", "/contexts/c", content_type=None)
    for path, raw in CASES:
        status, body, _h = await client.call("POST", path, raw=raw)
        assert (status, body["code"]) == (400, "malformed_request"), path
    status, body, _h = await client.call(
        "POST", "/import", raw=b'{"taguru_batch":1,"context":"\\ud800","source":"s","create":{}}\n', content_type=None
    )
    assert (status, body["code"]) == (400, "malformed_request")
    assert body["error"].startswith("line 1: not JSON: ")
    status, body, _h = await client.call("POST", "/mcp", raw=b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}')
    assert status == 400 and body["error"]["code"] == -32700
    # a valid surrogate pair is an ordinary character
    await client.ok(
        "POST", "/contexts/c/associations", raw=b'[{"subject":"\\ud83c\\udf76","label":"l","object":"o","weight":1.0}]'
    )
    status, body, _h = await client.call("GET", "/contexts/c")
    assert body["result"]["stats"]["concepts"] == 2
