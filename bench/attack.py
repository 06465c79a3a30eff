"""Schemathesis over `/openapi.json` of a real server: generated cases over every operation, failures by check.

Two passes against one server seeded with the demo corpus (context `demo`): `seeded` fixes the
`{name}` path parameter to `demo`, so the generated bodies reach the graph, passage and evidence
code (DELETE of the context is left to the other pass); `names` generates the names too.

Every check runs (`--checks all`); the attacked server has one admin token (`TOKEN`), which the run
sends, so `ignored_auth` sees a missing or wrong token refused. The one 5xx accepted is the 501 the
contract gives `POST /contexts/{name}/embeddings/refresh` without an embedding provider, for that
operation only. `attack_hooks.py` says how bodies go on the wire.

    .venv/bin/python bench/attack.py                   # ≈ 8,800 cases
    .venv/bin/python bench/attack.py --examples 120    # the ≈ 20k-case run
    .venv/bin/python bench/attack.py --url http://127.0.0.1:8248 --token T --examples 50   # a running server
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
CHECKS = ("all",)
SEEDED = "demo"
TOKEN = "attack-admin-token"
"""The one admin key of the attacked server: the document declares bearer auth on every routed operation,
so the run sends it, and `ignored_auth` checks that a missing or wrong token is refused."""
ATTACK_SETTINGS = {"TAGURU_API_TOKEN": TOKEN, "TAGURU_AUTH_FAIL_LIMIT_PER_MIN": "0"}
"""The failed-auth limiter is off: `ignored_auth` sends wrong tokens on purpose, and a 429 there would hide the 401."""
REFRESH = "post_contexts_name_embeddings_refresh"
"""With no embedding provider configured this operation answers 501 `embeddings_unconfigured` by contract
(embeddings spec §6.2): the one 5xx the run accepts, for this operation only."""
CORPUS = ROOT / "cli" / "demo" / "corpus.jsonl"


@attrs.frozen
class Pass:
    """One schemathesis run: operations (tested of the document's), generated cases, failures by check,
    errors and wall time."""

    name: str
    cases: int
    failures: dict[str, int]
    errors: list[str]
    seconds: float
    exit_code: int
    tested: int = 0
    operations: int = 0

    @property
    def clean(self) -> bool:
        return self.exit_code == 0 and not self.failures and not self.errors


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _request(url: str, method: str, body: bytes | None, content_type: str, token: str | None = None) -> Any:
    headers = {"Content-Type": content_type}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def seed(url: str, token: str | None = None) -> None:
    """Import the demo corpus (context `demo`: associations, aliases, passages, markers) and derive its communities."""
    reply = _request(url + "/import", "POST", CORPUS.read_bytes(), "application/x-ndjson", token)
    if reply.get("status") != "ok":
        raise RuntimeError(f"the demo import was refused: {reply}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    if token:
        env["TAGURU_API_TOKEN"] = token
    derive = [sys.executable, "-m", "taguru_server.cli", "communities", "--context", SEEDED, "--url", url]
    subprocess.run(derive, cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, check=True, capture_output=True, timeout=300)


@contextmanager
def served(data_dir: Path, log: Path, settings: dict[str, str] | None = None) -> Iterator[str]:
    """`taguru serve` on a free port over `data_dir`, seeded; yields its base URL. `settings`: extra TAGURU_* values."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
    env.update(TAGURU_DATA_DIR=str(data_dir), TAGURU_ADDR=f"127.0.0.1:{port}", PYTHONPATH=str(ROOT))
    env.update(settings or {})
    token = env.get("TAGURU_API_TOKEN")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "taguru_server.cli", "serve"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            wait_live(proc, url)
            seed(url, token)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


def wait_live(proc: subprocess.Popen[bytes], url: str) -> None:
    for _ in range(600):  # a readiness wait, not a timing assertion
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/live", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server never became ready")


def config_text(name: str, token: str) -> str:
    """The run's configuration: the bearer token, the pinned `{name}` of the seeded pass, and the 501 by contract."""
    lines = ["[auth.openapi.bearer]", f'bearer = "{token}"', ""]
    if name == "seeded":
        lines += ["[parameters]", f'"path.name" = "{SEEDED}"', ""]
    lines += [
        "[[operations]]",
        f'include-operation-id = "{REFRESH}"',
        'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "501"]',
    ]
    return "\n".join(lines) + "\n"


def run_pass(url: str, name: str, examples: int, seed_value: int, work: Path, token: str = TOKEN) -> Pass:
    """One deterministic `schemathesis run` over `url`'s document with every check."""
    work.mkdir(parents=True, exist_ok=True)
    config = work / f"{name}.toml"
    config.write_text(config_text(name, token), encoding="utf-8")
    report = work / f"{name}.json"
    cmd = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(config),
        "run",
        url + "/openapi.json",
        "--checks",
        ",".join(CHECKS),
        "--max-examples",
        str(examples),
        "--seed",
        str(seed_value),
        "--generation-database",
        "none",
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--report",
        "json",
        "--report-json-path",
        str(report),
    ]
    if name == "seeded":
        cmd += ["--exclude-operation-id", "delete_contexts_name"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "attack_hooks", "PYTHONPATH": str(BENCH), "NO_COLOR": "1"}
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    (work / f"{name}.out").write_text(done.stdout + done.stderr, encoding="utf-8")
    if not report.exists():
        return Pass(
            name, 0, {}, [f"no report (exit {done.returncode}): {done.stderr[-2000:]}"], seconds, done.returncode
        )
    data = json.loads(report.read_text(encoding="utf-8"))
    failures: Counter[str] = Counter()
    for group in data["failures"]:
        failures[f"{group['code']} {group['title']} ({', '.join(group['operations'])})"] += int(group["count"])
    errors = [f"{e['title']} x{e['count']}" for e in data["errors"]]
    operations = data["operations"]
    return Pass(
        name,
        int(data["test_cases"]["generated"]),
        dict(failures),
        errors,
        seconds,
        done.returncode,
        int(operations["tested"]),
        int(operations["total"]),
    )


def attack(url: str, examples: int, seed_value: int, work: Path, token: str = TOKEN) -> list[Pass]:
    """Both passes over one seeded server whose admin key is `token`."""
    return [run_pass(url, name, examples, seed_value, work / name, token) for name in ("seeded", "names")]


def render(passes: list[Pass]) -> str:
    lines = [f"{'pass':<8} {'operations':>10} {'cases':>7} {'failures':>9} {'errors':>7} {'seconds':>8}"]
    for p in passes:
        ops = f"{p.tested}/{p.operations}"
        lines.append(
            f"{p.name:<8} {ops:>10} {p.cases:>7} {sum(p.failures.values()):>9} {len(p.errors):>7} {p.seconds:>8.1f}"
        )
        for check, count in sorted(p.failures.items()):
            lines.append(f"    {check}: {count}")
        lines.extend(f"    error: {e}" for e in p.errors)
    total = sum(p.cases for p in passes)
    failures = sum(sum(p.failures.values()) for p in passes)
    lines.append(
        f"{'total':<8} {'':>10} {total:>7} {failures:>9} {sum(len(p.errors) for p in passes):>7} "
        f"{sum(p.seconds for p in passes):>8.1f}"
    )
    lines.append("checks: " + ", ".join(CHECKS))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=15, help="max generated cases per operation and phase")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--url", help="attack a running, already seeded server instead of starting one")
    parser.add_argument("--token", default=TOKEN, help="with --url: the server's admin token (TAGURU_API_TOKEN)")
    parser.add_argument("--work", type=Path, help="where reports and logs go (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        if args.url:
            passes = attack(args.url.rstrip("/"), args.examples, args.seed, work, args.token)
        else:
            with served(work / "data", work / "server.log", ATTACK_SETTINGS) as url:
                passes = attack(url, args.examples, args.seed, work)
        print(render(passes))
    return 0 if all(p.clean for p in passes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
