"""GET /ui, the evidence inspector: how it is served, what it may do in a browser, and what it renders."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import anyio
import pytest
from conftest import Client, start_client
from process_support import ROOT, Server

from taguru_server.cli.demo import demo_stream_path
from taguru_server.server.inspector import ASSETS, CONTENT_SECURITY_POLICY

TOKEN = "tok-inspector-4f1d"


# ----- served like a probe ----------------------------------------------------------------------


async def get(client: Client, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    async with client.session.get(client.base + path, headers=headers or {}) as resp:
        return resp.status, await resp.read(), resp.headers


@pytest.mark.anyio
async def test_page_and_assets_are_served_with_their_types_and_policy(client: Client) -> None:
    expected = {"/ui": "text/html", "/ui/app.js": "text/javascript", "/ui/app.css": "text/css"}
    for path, media in expected.items():
        status, body, headers = await get(client, path + "?context=demo")
        assert status == 200, path
        assert headers["Content-Type"] == f"{media}; charset=utf-8"
        assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Cache-Control"] == "no-cache"
        assert body == ASSETS[path].body
        # unchanged: a revalidation answers 304 without a body
        status, body, again = await get(client, path, {"If-None-Match": headers["ETag"]})
        assert (status, body, again["ETag"]) == (304, b"", headers["ETag"])
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "'unsafe-eval'" not in CONTENT_SECURITY_POLICY
    status, _body, _h = await get(client, "/ui/nothing.js")
    assert status == 404
    async with client.session.post(client.base + "/ui") as resp:
        assert resp.status == 405


@pytest.mark.anyio
async def test_with_auth_on_the_page_needs_no_token_but_the_api_does(settings_factory: Any) -> None:
    server, client, session = await start_client(settings_factory(TAGURU_API_TOKENS=f"viewer:{TOKEN}"))
    try:
        for path in ASSETS:
            status, _body, headers = await get(client, path)
            assert status == 200 and "WWW-Authenticate" not in headers, path
        status, _body, _h = await get(client, "/contexts")
        assert status == 401
    finally:
        await session.close()
        await server.close()


def test_the_page_loads_nothing_inline_or_foreign_and_writes_no_markup() -> None:
    html = ASSETS["/ui"].body.decode()
    script = ASSETS["/ui/app.js"].body.decode()
    assert re.findall(r"<script\b[^>]*>", html) == ['<script src="ui/app.js" defer>']
    assert "<style" not in html and " style=" not in html
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers
    assert not re.search(r"(src|href)=\"(https?:)?//", html)  # nothing from another origin
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in script, sink


# ----- in a real browser ---------------------------------------------------------------------------

DEMO_QUERY = {"context": "demo", "origins": "青嶺酒造", "labels": "杜氏", "max_items": "6"}
DEMO_BODY = {"origins": ["青嶺酒造"], "labels": ["杜氏"], "budget": {"max_items": 6}, "explain": True}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (.ci/run installs Debian's chromium)")
        pytest.skip("chromium is not installed")
    return found


def artifacts_dir() -> Path:
    """Where the screenshots go: $TAGURU_ARTIFACTS_DIR, else artifacts/ at the repository root (ignored by git)."""
    path = Path(os.environ.get("TAGURU_ARTIFACTS_DIR") or ROOT / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def browse(url: str, profile: Path, *extra: str) -> str:
    """Headless Chromium on `url`; virtual time lets the page's API calls finish before the DOM is taken."""
    args = [
        chromium(),
        "--headless",
        "--no-sandbox",  # the suite may run as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=10000",
        *extra,
        url,
    ]
    done = subprocess.run(args, capture_output=True, text=True, timeout=90, cwd=profile.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def rendered(url: str, tmp_path: Path, state: str) -> str:
    """The DOM once the page reached `state` (`done`, `auth`); one retry for a slow first start."""
    dom = ""
    for attempt in range(2):
        dom = browse(url, tmp_path / f"profile-dom-{attempt}", "--dump-dom")
        if f'data-state="{state}"' in dom:
            return dom
    raise AssertionError(f"the page never reached {state!r}: {dom[:3000]}")


def screenshot(url: str, tmp_path: Path, name: str) -> Path:
    target = artifacts_dir() / name
    browse(url, tmp_path / f"profile-{name}", "--window-size=1400,1800", f"--screenshot={target}")
    assert target.stat().st_size > 10_000
    return target


class Dom(HTMLParser):
    """The rows the inspector renders: stage rows (`data-stage`) and item rows (`data-fused-rank`) with their text."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[str] = []
        self.items: list[tuple[int, str]] = []
        self.hidden: set[str] = set()
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "hidden" in a and a.get("id"):
            self.hidden.add(str(a["id"]))
        if tag == "tr" and "data-stage" in a:
            self.stages.append(str(a["data-stage"]))
        if tag == "tr" and "data-fused-rank" in a:
            self.items.append((int(str(a["data-fused-rank"])), ""))
            self._row = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._row is not None:
            rank, _ = self.items[-1]
            self.items[-1] = (rank, " ".join(self._row))
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._row is not None:
            self._row.append(data)


class Devtools:
    """Headless Chromium driven over its DevTools protocol, for what a DOM dump cannot show (URL, storage)."""

    def __init__(self, url: str, profile: Path) -> None:
        self.profile = profile
        self.proc = subprocess.Popen(
            [
                chromium(),
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def socket_url(self) -> str:
        port_file = self.profile / "DevToolsActivePort"
        for _ in range(600):  # a start-up wait, not an assertion on time
            if port_file.exists() and port_file.read_text().strip():
                break
            time.sleep(0.05)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as resp:
            pages = [t for t in json.loads(resp.read()) if t["type"] == "page"]
        return str(pages[0]["webSocketDebuggerUrl"])

    async def when(self, state: str, expression: str) -> Any:
        """`expression`'s value once the page's body is in `state` (polled for up to 60 s)."""
        check = f"document.body && document.body.dataset.state === {json.dumps(state)} ? ({expression}) : null"
        async with aiohttp.ClientSession() as session, session.ws_connect(self.socket_url(), max_msg_size=0) as ws:
            for n in range(600):
                await ws.send_json({"id": n, "method": "Runtime.evaluate", "params": {"expression": check}})
                reply: dict[str, Any] = {}
                while reply.get("id") != n:
                    reply = await ws.receive_json(timeout=30)
                value = reply["result"]["result"].get("value")
                if value is not None:
                    return value
                await anyio.sleep(0.1)
        raise AssertionError(f"the page never reached {state!r}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def parse(dom: str) -> Dom:
    parser = Dom()
    parser.feed(dom)
    return parser


def seed_demo(server: Server, token: str | None = None) -> None:
    headers = {"Content-Type": "application/x-ndjson", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(
        server.url + "/import", data=demo_stream_path().read_bytes(), method="POST", headers=headers
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200


def evidence(server: Server, token: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(
        server.url + "/contexts/demo/evidence", data=json.dumps(DEMO_BODY).encode(), method="POST", headers=headers
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return dict(json.loads(resp.read())["result"])


def item_sources(item: dict[str, Any]) -> set[str]:
    if "passage" in item:
        return {item["passage"]["source"]}
    if "association" in item:
        return {a["source"] for a in item["association"]["attributions"]}
    return {f"community:{item['community']['community']}"}


def assert_renders(dom: str, package: dict[str, Any]) -> None:
    page = parse(dom)
    assert page.stages == [s["stage"] for s in package["plan"]["stages"]]
    assert [rank for rank, _text in page.items] == [item["fused_rank"] for item in package["items"]]
    for (_rank, text), item in zip(page.items[:3], package["items"][:3], strict=True):
        for source in item_sources(item):
            assert source in text, (source, text)
        for ref in item["citation_refs"]:
            assert f"{ref['source']} ¶{ref['paragraph']}" in text
    assert "auth" in page.hidden and "error" in page.hidden


@pytest.mark.slow
def test_the_inspector_renders_what_the_api_answers(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log")
    try:
        seed_demo(server)
        package = evidence(server)
        url = f"{server.url}/ui?{urlencode(DEMO_QUERY)}"
        assert_renders(rendered(url, tmp_path, "done"), package)
        screenshot(url, tmp_path, "inspector.png")
    finally:
        server.stop()


@pytest.mark.slow
def test_with_auth_on_the_page_asks_for_a_token_and_then_renders(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", TAGURU_API_TOKENS=f"viewer:{TOKEN}")
    try:
        seed_demo(server, TOKEN)
        package = evidence(server, TOKEN)
        url = f"{server.url}/ui?{urlencode(DEMO_QUERY)}"
        prompt = rendered(url, tmp_path, "auth")
        assert "auth" not in parse(prompt).hidden
        assert "This server requires an API token" in prompt
        assert parse(prompt).items == [] and parse(prompt).stages == []
        screenshot(url, tmp_path, "inspector-token-prompt.png")
        # a token in the fragment: kept in the tab's session storage and taken out of the address
        browser = Devtools(f"{url}#token={quote(TOKEN)}&keep=1", tmp_path / "profile-devtools")
        try:
            found = anyio.run(
                browser.when,
                "done",
                "JSON.stringify([location.href, sessionStorage.getItem('taguru.inspector.token'), "
                "document.documentElement.outerHTML])",
            )
        finally:
            browser.close()
        href, stored, dom = json.loads(found)
        assert (href, stored) == (url + "#keep=1", TOKEN)
        assert_renders(dom, package)
        assert TOKEN not in dom
    finally:
        server.stop()
