"""`taguru mcp`: the stdio bridge, driven by the official `mcp` 2.3.0 client against a real running server."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import load_fixture

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venv" / "bin" / "python"
PYTHON = str(VENV_PY) if VENV_PY.exists() else sys.executable

pytestmark = pytest.mark.slow


class RunningServer:
    """`python -m taguru_server.cli serve` on a free port (TAGURU_ADDR=127.0.0.1:0), address read from stdout."""

    def __init__(self, data_dir: Path, **env: str) -> None:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
        clean.update({"TAGURU_ADDR": "127.0.0.1:0", "TAGURU_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}, **env)
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "taguru_server.cli", "serve"],
            cwd=ROOT,
            env=clean,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("listening on "):
                self.url = "http://" + line.removeprefix("listening on ").strip()
                break
        else:
            raise AssertionError("the server exited before printing its address")
        threading.Thread(target=lambda: [None for _ in self.proc.stdout or ()], daemon=True).start()

    def call(self, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    running = RunningServer(
        tmp_path_factory.mktemp("mcp-stdio") / "data",
        TAGURU_API_TOKENS="boss:atok,reader:rtok",
        TAGURU_KEY_SCOPES=json.dumps({"reader": {"role": "read", "contexts": ["sake"]}}),
    )
    try:
        for method, path, body in [
            ("PUT", "/contexts/sake", {"description": "bridge corpus"}),
            (
                "POST",
                "/contexts/sake/sources",
                {"passages": {"docs/kura.md": "青嶺酒造は雲居県霧沢町の蔵元である。\n\n杜氏は高瀬である。"}},
            ),
            (
                "POST",
                "/contexts/sake/associations",
                [
                    {
                        "subject": "青嶺酒造",
                        "label": "杜氏",
                        "object": "高瀬",
                        "weight": 1.0,
                        "source": "docs/kura.md",
                        "paragraph": 1,
                    }
                ],
            ),
            ("PUT", "/contexts/other", None),
        ]:
            status, _ = running.call(method, path, body, token="atok")
            assert status == 200
        yield running
    finally:
        running.stop()


def bridge(url: str, token: str | None = None, **env: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    extra = {"TAGURU_URL": url, "PYTHONPATH": str(ROOT), **env}
    if token is not None:
        extra["TAGURU_API_TOKEN"] = token
    return StdioServerParameters(command=PYTHON, args=["-m", "taguru_server.cli", "mcp"], env=extra, cwd=str(ROOT))


def without_time(text: str) -> Any:
    doc = json.loads(text)
    doc.pop("time", None)
    return doc


def http_tool_call(server: RunningServer, name: str, arguments: dict[str, Any], token: str) -> dict[str, Any]:
    status, reply = server.call(
        "POST",
        "/mcp",
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}},
        token=token,
    )
    assert status == 200
    return reply["result"]


@pytest.mark.anyio
@pytest.mark.parametrize("mode", [None, "legacy"])
async def test_handshake_tools_and_assemble_evidence(server: RunningServer, mode: str | None) -> None:
    from mcp.client.client import Client

    options = {} if mode is None else {"mode": mode}
    async with Client(bridge(server.url, "rtok"), **options) as client:
        assert client.server_info is not None and client.server_info.name == "taguru"
        assert client.instructions and client.instructions.startswith("Taguru keeps knowledge contexts")
        with urllib.request.urlopen(
            urllib.request.Request(server.url + "/protocol", headers={"Authorization": "Bearer rtok"})
        ) as response:
            assert response.headers["Content-Type"] == "text/markdown; charset=utf-8"
            assert client.instructions == response.read().decode("utf-8")

        listed = await client.list_tools()
        _s, http_list = server.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, token="rtok")
        http_tools = http_list["result"]["tools"]
        assert [t.name for t in listed.tools] == [t["name"] for t in http_tools]
        ours = {t.name: t.model_dump(by_alias=True, exclude_none=True) for t in listed.tools}
        fixture = load_fixture("mcp", "assemble_evidence_tool_schema")["response"]["tools"]
        assert {k: ours["assemble_evidence"][k] for k in ("name", "description", "inputSchema")} in fixture
        for tool in http_tools:
            assert {k: ours[tool["name"]][k] for k in ("name", "description", "inputSchema")} == tool

        arguments = {
            "context": "sake",
            "origins": ["青嶺酒造"],
            "labels": "杜氏",
            "text_fallback_query": "杜氏",
            "budget": {"max_items": 3},
        }
        result = await client.call_tool("assemble_evidence", arguments)
        assert not result.is_error and result.structured_content is None
        text = result.content[0].text
        envelope = json.loads(text)
        assert envelope["status"] == "ok" and envelope["result"]["items"]
        # the package is the HTTP one: the raw evidence endpoint and POST /mcp give the same body
        body = {k: v for k, v in arguments.items() if k != "context"}
        status, http = server.call("POST", "/contexts/sake/evidence", body, token="rtok")
        assert status == 200 and without_time(text) == {k: v for k, v in http.items() if k != "time"}
        assert without_time(text) == without_time(
            http_tool_call(server, "assemble_evidence", arguments, "rtok")["content"][0]["text"]
        )

        missing = await client.call_tool("assemble_evidence", {"context": "sake"})
        assert missing.is_error and missing.content[0].text == "missing required argument 'origins'"
        assert missing.structured_content is None

        refused = await client.call_tool("assemble_evidence", {"context": "other", "origins": "a"})
        assert refused.is_error
        assert refused.content[0].text.startswith('HTTP 403: {"status":"error","code":"forbidden",')
        assert refused.structured_content is not None
        assert refused.structured_content["error"] == "key 'reader' has no grant on context 'other'"

        bad = await client.call_tool(
            "assemble_evidence", {"context": "sake", "origins": "a", "budget": {"max_items": -1}}
        )
        assert bad.is_error and bad.content[0].text.startswith("HTTP 422: ")
        assert bad.structured_content is not None and bad.structured_content["code"] == "malformed_request"
        expected = http_tool_call(
            server, "assemble_evidence", {"context": "sake", "origins": "a", "budget": {"max_items": -1}}, "rtok"
        )
        assert without_time(bad.content[0].text.removeprefix("HTTP 422: ")) == without_time(
            expected["content"][0]["text"].removeprefix("HTTP 422: ")
        )

        unknown = await client.call_tool("no_such_tool", {})
        assert unknown.is_error and unknown.content[0].text == "unknown tool 'no_such_tool'"

        cite = await client.call_tool("cite_passage", {"context": "sake", "source": "docs/kura.md", "paragraph": 1})
        assert json.loads(cite.content[0].text)["result"]["text"] == "杜氏は高瀬である。"


@pytest.mark.anyio
async def test_unreachable_server_and_bad_token(server: RunningServer) -> None:
    from mcp.client.client import Client

    with socket.socket() as s:  # a port with nothing listening on it
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    async with Client(bridge(closed, "atok"), mode="legacy") as client:
        assert client.instructions and client.instructions.startswith("Taguru keeps knowledge contexts")
        assert "assemble_evidence" in [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("assemble_evidence", {"context": "sake", "origins": "青嶺酒造"})
        assert result.is_error and result.content[0].text == "failed to reach the taguru server"
        assert result.structured_content is None

    async with Client(bridge(server.url, "wrong")) as client:
        result = await client.call_tool("assemble_evidence", {"context": "sake", "origins": "青嶺酒造"})
        assert result.is_error
        assert result.content[0].text.startswith('HTTP 401: {"status":"error","code":"unauthorized",')
        assert result.structured_content is not None and result.structured_content["code"] == "unauthorized"


def test_raw_framing(server: RunningServer) -> None:
    """Line-level behaviour the SDK client never exercises: refusals, blank lines, stdout holds frames only."""
    lines = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        "nope",
        "",
        [{"jsonrpc": "2.0", "id": 9, "method": "ping"}],
        {"jsonrpc": "1.0", "id": 7, "method": "ping"},
        b"\xff\xfe",
        "x" * 300,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "assemble_evidence", "arguments": {"context": "sake", "origins": "青嶺酒造"}},
        },
    ]
    payload = b"".join(
        (
            line
            if isinstance(line, bytes)
            else (line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)).encode()
        )
        + b"\n"
        for line in lines
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env.update(TAGURU_URL=server.url, PYTHONPATH=str(ROOT), TAGURU_MCP_MAX_LINE_BYTES="256")
    proc = subprocess.Popen(
        [PYTHON, "-m", "taguru_server.cli", "mcp"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(payload)
    proc.stdin.flush()
    replies: dict[Any, list[dict[str, Any]]] = {}
    while 2 not in replies:  # the tool call is answered last; closing stdin earlier would cancel it
        line = proc.stdout.readline()
        assert line, "the bridge closed stdout before answering the tool call"
        reply = json.loads(line)
        replies.setdefault(reply.get("id"), []).append(reply)
    rest, err = proc.communicate(timeout=30)  # closes stdin: the bridge exits at EOF
    assert proc.returncode == 0
    for extra in rest.splitlines():  # replies may arrive out of order (refusals after the tool call)
        reply = json.loads(extra)  # stdout carries JSON-RPC frames only
        replies.setdefault(reply.get("id"), []).append(reply)
    assert replies[1][0]["result"]["serverInfo"]["name"] == "taguru"
    refusals = sorted((r["error"]["code"], r["error"]["message"]) for r in replies[None])
    assert refusals == sorted(
        [
            (-32700, "line is not JSON"),
            (-32600, "batch messages are not part of MCP; send one message per line"),
            (-32700, "line is not UTF-8"),
            (-32700, "line exceeds the 256-byte frame cap"),
        ]
    )
    assert replies[7][0]["error"] == {"code": -32600, "message": 'not a JSON-RPC 2.0 message (jsonrpc must be "2.0")'}
    # no token against a server with auth on: the routed call comes back as the server's 401
    assert replies[2][0]["result"]["isError"] is True
    assert replies[2][0]["result"]["content"][0]["text"].startswith("HTTP 401: ")
    assert b"taguru-mcp: TAGURU_API_TOKEN not set; requests go out without credentials" in err


@pytest.mark.parametrize(
    ("flags", "url", "text"),
    [
        (["--url", "notaurl"], None, "taguru mcp: the --url value could not be parsed as a URL (got 'notaurl')"),
        ([], "notaurl", "taguru mcp: the TAGURU_URL value could not be parsed as a URL (got 'notaurl')"),
        (["--url", "ftp://host"], None, "taguru mcp: the --url value must be an http:// or https:// URL"),
        (["--url", "http://user:hunter2@host:1"], None, "taguru mcp: the URL must not carry credentials"),
    ],
)
def test_a_bad_url_is_one_line_and_exit_2(flags: list[str], url: str | None, text: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env["PYTHONPATH"] = str(ROOT)
    if url is not None:
        env["TAGURU_URL"] = url
    proc = subprocess.run(
        [PYTHON, "-m", "taguru_server.cli", "mcp", *flags],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith(text) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr


def _piped(server: RunningServer, lines: list[Any], *command: str, **env: str) -> tuple[list[dict[str, Any]], str, int]:
    """Write every line, close stdin, read every reply: what a script piping into the bridge gets."""
    payload = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    environ.update(TAGURU_URL=server.url, PYTHONPATH=str(ROOT), TAGURU_API_TOKEN="atok", **env)
    argv = list(command) or [PYTHON, "-m", "taguru_server.cli", "mcp"]
    done = subprocess.run(argv, cwd=ROOT, env=environ, input=payload, capture_output=True, timeout=120)
    replies = [json.loads(x) for x in done.stdout.splitlines()]
    for line, reply in zip(done.stdout.decode().splitlines(), replies, strict=True):  # compact, sorted keys
        assert line == json.dumps(reply, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return replies, done.stderr.decode(), done.returncode


def _tool_call(rid: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def test_every_call_piped_before_eof_is_answered(server: RunningServer) -> None:
    # two workers and the queue's whole 4 × 2: the reader may queue every line before a worker takes one,
    # so more calls than the queue holds would be refused ("tool queue is full") now and then
    calls = [_tool_call(i, "recall", {"context": "sake", "cue": "青嶺酒造"}) for i in range(1, 9)]
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2024-11-05"}}
    replies, _err, code = _piped(server, [init, *calls], TAGURU_MCP_MAX_CONCURRENT_TOOLS="2")
    assert code == 0
    assert sorted(r["id"] for r in replies) == list(range(9))
    assert replies[0]["id"] == 0 and replies[0]["result"]["protocolVersion"] == "2024-11-05"
    for reply in replies[1:]:
        assert json.loads(reply["result"]["content"][0]["text"])["result"]["total"] == 1


def test_inline_methods_and_the_protocol_gate(server: RunningServer) -> None:
    modern = {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}
    old = {"io.modelcontextprotocol/protocolVersion": "2025-01-01"}
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"cursor": "x", "_meta": modern}},
        {"jsonrpc": "2.0", "id": 3, "method": "no/such"},
        {"jsonrpc": "2.0", "id": 4, "method": "ping", "params": {"_meta": old}},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "id": 5, "method": "ping"},
    ]
    replies, _err, code = _piped(server, lines)
    by_id = {r["id"]: r for r in replies}
    assert code == 0 and sorted(by_id) == [1, 2, 3, 4, 5]
    assert by_id[1]["result"]["supportedVersions"] == ["2026-07-28"]
    assert by_id[1]["result"]["instructions"].startswith("Taguru keeps knowledge contexts")
    assert "nextCursor" not in by_id[2]["result"] and by_id[2]["result"]["tools"]
    assert by_id[3]["error"] == {"code": -32601, "message": "unknown method 'no/such'"}
    assert by_id[4]["error"] == {
        "code": -32022,
        "message": "unsupported protocol version",
        "data": {"supported": ["2026-07-28"], "requested": "2025-01-01"},
    }
    assert by_id[5]["result"] == {}


def test_the_taguru_mcp_command_is_the_same_bridge(server: RunningServer) -> None:
    command = Path(PYTHON).with_name("taguru-mcp")
    if not command.exists():
        pytest.skip("the console scripts are not installed in this environment")
    call = _tool_call(7, "list_contexts", {})
    replies, err, code = _piped(server, [call], str(command))
    assert code == 0 and [r["id"] for r in replies] == [7], err
    assert "sake" in replies[0]["result"]["content"][0]["text"]


def test_a_pipelined_backlog_drains_through_a_small_pool(server: RunningServer) -> None:
    calls = [_tool_call(i, "list_contexts", {}) for i in range(50)]
    replies, _err, code = _piped(server, calls, TAGURU_MCP_MAX_CONCURRENT_TOOLS="2")
    assert code == 0
    assert sorted(r["id"] for r in replies) == list(range(50))  # every id exactly one reply
    for reply in replies:
        assert "result" in reply or reply["error"] == {"code": -32000, "message": "tool queue is full; retry the call"}


def test_initialize_is_answered_despite_a_stalled_protocol_probe() -> None:
    with socket.socket() as listener:  # accepts connections and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        environ = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
        environ.update(TAGURU_URL=url, PYTHONPATH=str(ROOT))
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        done = subprocess.run(
            [PYTHON, "-m", "taguru_server.cli", "mcp"],
            cwd=ROOT,
            env=environ,
            input=(json.dumps(init) + "\n").encode(),
            capture_output=True,
            timeout=30,
        )
    reply = json.loads(done.stdout.splitlines()[0])
    assert reply["result"]["instructions"].startswith("Taguru keeps knowledge contexts")
    assert b"taguru-mcp: GET /protocol failed (" in done.stderr
    assert f"serving the bundled copy — is the server up at {url}?".encode() in done.stderr


@pytest.mark.parametrize(
    ("url", "token", "warned"),
    [
        ("http://10.0.0.5:8248", "t", True),
        ("http://taguru.internal:8248", "t", True),
        ("http://10.0.0.5:8248", None, False),
        ("https://10.0.0.5:8248", "t", False),
        ("http://localhost:8248", "t", False),
        ("http://127.0.0.1:8248", "t", False),
        ("http://[::1]:8248", "t", False),
    ],
)
def test_the_plaintext_token_warning_fires_only_off_loopback_over_http(
    url: str, token: str | None, warned: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from taguru_server.server.config import bridge_settings
    from taguru_server.server.mcp.stdio import startup_warnings

    env = {"TAGURU_URL": url} | ({"TAGURU_API_TOKEN": token} if token else {})
    startup_warnings(bridge_settings(env))
    assert ("travels unencrypted" in capsys.readouterr().err) is warned


@pytest.mark.parametrize(("raw", "secs"), [("120", 120.0), ("", 75.0), ("0", 75.0), ("-5", 75.0), ("soon", 75.0)])
def test_a_zero_or_unparseable_timeout_falls_back_to_the_default(raw: str, secs: float) -> None:
    from taguru_server.server.config import bridge_settings

    assert bridge_settings({"TAGURU_MCP_TIMEOUT_SECS": raw}).timeout == secs


@pytest.mark.anyio
async def test_an_agents_memory_loop_over_stdio(server: RunningServer) -> None:
    """The official client through `taguru mcp`: build, read, correct and follow a memory, then the same
    calls with a read-only key scoped to another context refused with the server's texts."""
    from mcp.client.client import Client

    kura = "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。"
    edge = {
        "subject": "青嶺酒造",
        "label": "杜氏",
        "object": "高瀬",
        "weight": 1.0,
        "source": "kura.md",
        "paragraph": 0,
    }

    async def call(client: Any, name: str, args: dict[str, Any]) -> Any:
        result = await client.call_tool(name, args)
        assert not result.is_error, (name, result.content[0].text)
        return json.loads(result.content[0].text)

    async with Client(bridge(server.url, "atok")) as client:
        assert (await call(client, "create_context", {"name": "memory"}))["status"] == "ok"
        tail = (await call(client, "changes", {"context": "memory"}))["result"]["next"]
        await call(client, "store_passages", {"context": "memory", "passages": {"kura.md": kura}})
        await call(client, "add_associations", {"context": "memory", "associations": [edge]})
        found = await call(client, "retrieve", {"context": "memory", "origins": ["青嶺酒造"]})
        assert [a["object"] for a in found["associations"]] == ["高瀬"]
        package = (await call(client, "assemble_evidence", {"context": "memory", "origins": ["青嶺酒造"]}))["result"]
        assert package["citations"][0]["source"] == "kura.md"
        await call(client, "retract_source", {"context": "memory", "source": "kura.md"})
        after = await call(client, "retrieve", {"context": "memory", "origins": ["青嶺酒造"]})
        assert after["associations"] == []
        kinds = [
            e["kind"] for e in (await call(client, "changes", {"context": "memory", "since": tail}))["result"]["events"]
        ]
        assert {"associations_added", "source_stored", "source_retracted"} <= set(kinds)
    async with Client(bridge(server.url, "rtok")) as client:
        refused = await client.call_tool("recall", {"context": "memory", "cue": "青嶺酒造"})
        assert refused.is_error and refused.structured_content is not None
        assert refused.structured_content["error"] == "key 'reader' has no grant on context 'memory'"
        write = await client.call_tool("add_associations", {"context": "sake", "associations": [edge]})
        assert write.is_error and write.structured_content is not None
        assert write.structured_content["error"].startswith("key 'reader' has role 'read', but ")
