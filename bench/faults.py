"""Crash safety under load: the server is SIGKILLed while writers write; no acknowledged write may be lost.

    .venv/bin/python bench/faults.py                            # 8 writers, 5 kills, seed 7
    .venv/bin/python bench/faults.py --writers 16 --kills 20 --seed 3

`taguru serve` runs over a fresh data dir. `--writers` loops each POST one association at a time
to the context `faults` (subject `wK`, label `wrote`, an object never written before) and note
which writes were answered 200. At seeded random moments (`--min-gap`..`--max-gap` seconds
apart) the server gets SIGKILL and is started again over the same data dir on the same port;
the writers keep going (a request that fails or finds no server is simply not acknowledged).
The last kill is followed by a restart with the writers stopped, and every association of the
context is read back (`POST /contexts/faults/query`, paged): an acknowledged write missing
from it is lost (exit 1); a write that landed without its answer reaching the writer is
counted but allowed; an association nobody sent is a phantom (exit 1).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import attrs
from attack import ROOT, free_port, wait_live

CONTEXT = "faults"
LABEL = "wrote"


class Process:
    """`taguru serve` over one data dir and port, started again after each kill."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TAGURU_")}
        self.env.update(TAGURU_DATA_DIR=str(data_dir), TAGURU_ADDR=f"127.0.0.1:{self.port}", PYTHONPATH=str(ROOT))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "taguru_server.cli", "serve"],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        wait_live(self.proc, self.url)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()


@attrs.define
class Ledger:
    """What the writers sent, what was acknowledged (object → request sent, answer read), other answers by status."""

    sent: set[str] = attrs.field(factory=set)
    acked: dict[str, tuple[float, float]] = attrs.field(factory=dict)
    other: Counter[int] = attrs.field(factory=Counter)


@attrs.frozen
class Kill:
    at: float
    restart_seconds: float  # SIGKILL → `/live` answers again


@attrs.frozen
class Outcome:
    kills: list[Kill]
    first_ack_after: list[float]  # per kill but the last: SIGKILL → the first write sent after it is acknowledged
    sent: int
    acked: int
    present: int
    lost: list[str]
    unacked_present: int
    phantoms: list[str]
    other: dict[int, int]
    tracebacks: int
    seconds: float

    @property
    def safe(self) -> bool:
        return not self.lost and not self.phantoms


async def writer(session: aiohttp.ClientSession, url: str, k: int, stop: asyncio.Event, ledger: Ledger) -> None:
    """Write one new association per request until `stop`; a failure waits 50 ms and moves on to the next."""
    path = f"{url}/contexts/{CONTEXT}/associations"
    n = 0
    while not stop.is_set():
        n += 1
        obj = f"w{k}-{n}"
        ledger.sent.add(obj)
        status = 0
        started = time.perf_counter()
        one = [{"subject": f"w{k}", "label": LABEL, "object": obj, "weight": 1.0}]
        try:
            async with session.post(path, json=one) as r:
                body: Any = await r.json(content_type=None)
                status = r.status if r.status != 200 or body.get("result") == 1 else -1
        except (aiohttp.ClientError, TimeoutError, ValueError):
            status = 0
        if status == 200:
            ledger.acked[obj] = (started, time.perf_counter())
        else:
            ledger.other[status] += 1
            await asyncio.sleep(0.05)


async def read_back(url: str, writers: int) -> list[str]:
    """Every object written to the context, paging the query lane by its keyset cursor."""
    found: list[str] = []
    after: dict[str, Any] | None = None
    async with aiohttp.ClientSession() as session:
        while True:
            body: dict[str, Any] = {"subject": [f"w{k}" for k in range(writers)], "label": LABEL, "limit": 1000}
            if after is not None:
                body["after"] = after
            async with session.post(f"{url}/contexts/{CONTEXT}/query", json=body) as resp:
                if resp.status != 200:
                    raise RuntimeError(f"the read-back query was answered {resp.status}")
                matches = (await resp.json())["result"]["matches"]
            found.extend(m["object"] for m in matches)
            if len(matches) < 1000:
                return found
            last = matches[-1]
            after = {key: last[key] for key in ("weight", "subject", "label", "object")}


async def kill_loop(server: Process, rng: random.Random, kills: int, gap: tuple[float, float]) -> list[Kill]:
    """SIGKILL the server `kills` times at random moments, starting it again after all but the last."""
    done: list[Kill] = []
    for i in range(kills):
        await asyncio.sleep(rng.uniform(*gap))
        at = time.perf_counter()
        server.kill()
        if i == kills - 1:
            done.append(Kill(at, 0.0))
            break
        await asyncio.to_thread(server.start)
        done.append(Kill(at, time.perf_counter() - at))
    return done


async def under_fire(server: Process, writers: int, kills: int, gap: tuple[float, float], seed: int) -> Outcome:
    started = time.perf_counter()
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{server.url}/contexts/{CONTEXT}") as resp:
            if resp.status != 200:
                raise RuntimeError(f"creating the context was answered {resp.status}")
    ledger = Ledger()
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=writers), timeout=timeout) as session:
        loops = [asyncio.create_task(writer(session, server.url, k, stop, ledger)) for k in range(writers)]
        done = await kill_loop(server, random.Random(seed), kills, gap)
        stop.set()
        await asyncio.gather(*loops)
    restart = time.perf_counter()
    await asyncio.to_thread(server.start)
    final_restart = time.perf_counter() - restart
    done[-1] = Kill(done[-1].at, final_restart)
    present = await read_back(server.url, writers)
    acks = list(ledger.acked.values())
    # the first write sent after the kill that was acknowledged
    first_ack_after = [min((end for sent, end in acks if sent > k.at), default=float("nan")) - k.at for k in done[:-1]]
    present_set = set(present)
    return Outcome(
        kills=done,
        first_ack_after=first_ack_after,
        sent=len(ledger.sent),
        acked=len(ledger.acked),
        present=len(present_set),
        lost=sorted(set(ledger.acked) - present_set),
        unacked_present=len(present_set - set(ledger.acked)),
        phantoms=sorted(present_set - ledger.sent) + (["(a duplicate)"] if len(present) != len(present_set) else []),
        other=dict(ledger.other),
        tracebacks=server.log.read_bytes().count(b"Traceback"),
        seconds=time.perf_counter() - started,
    )


def crash_run(
    work: Path, writers: int = 8, kills: int = 5, gap: tuple[float, float] = (1.0, 3.0), seed: int = 7
) -> Outcome:
    """Start a server over `work/data`, write under `kills` SIGKILLs, read everything back, stop the server."""
    work.mkdir(parents=True, exist_ok=True)
    server = Process(work / "data", work / "server.log")
    server.start()
    try:
        return asyncio.run(under_fire(server, writers, kills, gap, seed))
    finally:
        server.stop()


def render(o: Outcome, writers: int) -> str:
    restarts = [k.restart_seconds for k in o.kills]
    others = ", ".join(f"{'no answer' if s == 0 else s} x{n}" for s, n in sorted(o.other.items()))
    lines = [
        f"{writers} writers, {len(o.kills)} kills, {o.seconds:.1f} s",
        f"writes sent {o.sent}, acknowledged {o.acked}, present after the last restart {o.present}",
        f"lost (acknowledged, absent): {len(o.lost)}" + (f" (first: {o.lost[0]})" if o.lost else ""),
        f"unacknowledged but present: {o.unacked_present}",
        f"phantoms (present, never sent): {len(o.phantoms)}",
        f"not acknowledged: {others or 'none'}",
        "restart s (SIGKILL → /live) per kill: " + ", ".join(f"{s:.2f}" for s in restarts),
        "SIGKILL → next acknowledged write s: " + ", ".join(f"{s:.2f}" for s in o.first_ack_after),
        f"tracebacks in the server log: {o.tracebacks}",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--min-gap", type=float, default=1.0, help="shortest time between kills, seconds")
    parser.add_argument("--max-gap", type=float, default=3.0, help="longest time between kills, seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--work", type=Path, help="keep the data dir and server log here (default: a temp dir)")
    args = parser.parse_args()
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        outcome = crash_run(work, args.writers, args.kills, (args.min_gap, args.max_gap), args.seed)
    print(render(outcome, args.writers))
    return 0 if outcome.safe else 1


if __name__ == "__main__":
    raise SystemExit(main())
