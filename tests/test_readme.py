"""The README's examples, run in order as a newcomer runs them: a real server on a fresh data dir, every
`sh` and `python` block not marked `readme-test: skip` run from the repository's files, and each block's
output compared with the `text` block under it (`…` stands for what differs between runs)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import attrs
import pytest
from process_support import PYTHON, ROOT, Server, base_env

README = ROOT / "README.md"
SKIP = "<!-- readme-test: skip"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)


@attrs.frozen
class Example:
    """One runnable block, where it starts, and what the README says it prints (None: not said)."""

    kind: str
    code: str
    line: int
    prints: str | None


def examples(text: str) -> list[Example]:
    """The README's runnable blocks in order, each with the `text` block right under it."""
    fences = list(FENCE.finditer(text))
    out: list[Example] = []
    for i, fence in enumerate(fences):
        kind = fence.group(1)
        if kind not in ("sh", "python"):
            continue
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        if before.startswith(SKIP):
            continue
        prints = None
        if i + 1 < len(fences):
            after = fences[i + 1]
            if after.group(1) == "text" and not text[fence.end() : after.start()].strip():
                prints = after.group(2)
        out.append(Example(kind, fence.group(2), text.count("\n", 0, fence.start()) + 1, prints))
    return out


def matches(expected: str, got: str) -> bool:
    """Line by line, `…` standing for any run of characters within its line."""
    want, have = expected.rstrip("\n").split("\n"), got.rstrip("\n").split("\n")
    if len(want) != len(have):
        return False
    return all(re.fullmatch(".*?".join(map(re.escape, w.split("…"))), h) for w, h in zip(want, have, strict=True))


def test_the_output_rule() -> None:
    assert matches('{"a":1,"time":…}\n', '{"a":1,"time":0.25}')
    assert not matches('{"a":1,"time":…}', '{"a":2,"time":0.25}')
    assert not matches("one\ntwo", "one")
    found = examples("<!-- readme-test: skip -->\n```sh\nno\n```\n\n```sh\nyes\n```\n\n```text\nout\n```\n")
    assert found == [Example("sh", "yes\n", 6, "out\n")]


def test_the_readme_has_examples_that_run() -> None:
    found = examples(README.read_text(encoding="utf-8"))
    assert sum(1 for e in found if e.prints is not None) >= 6 and any(e.kind == "python" for e in found)


@pytest.mark.slow
def test_the_readme_examples_run_in_order_and_print_what_it_says(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    server = Server(tmp_path / "data", tmp_path / "server.log")
    address = f"127.0.0.1:{server.port}"
    env = base_env(tmp_path / "data", TAGURU_ADDR=address)
    env.pop("TAGURU_URL", None)
    env["PATH"] = f"{Path(PYTHON).parent}{os.pathsep}{env.get('PATH', '')}"

    def here(text: str) -> str:
        return text.replace("127.0.0.1:8248", address).replace("localhost:8248", f"localhost:{server.port}")

    try:
        for example in examples(README.read_text(encoding="utf-8")):
            command = ["bash", "-e", "-o", "pipefail", "-c", here(example.code)]
            if example.kind == "python":
                command = [PYTHON, "-c", here(example.code)]
            ran = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=120)
            where = f"README.md line {example.line}"
            assert ran.returncode == 0, f"{where} exited {ran.returncode}: {ran.stderr[-2000:]}"
            if example.prints is not None:
                assert matches(here(example.prints), ran.stdout), f"{where} printed:\n{ran.stdout}"
    finally:
        server.stop()
