"""docs/operations.md lists every TAGURU_* variable the code reads, in its one table of variables, and the
table and the registry (server/variables.py) agree both ways, defaults included."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from taguru_server.server.config import Settings, load_settings
from taguru_server.server.variables import PREFIX, REGISTRY, Policy

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pipeline", "stages", "store", "server", "evaluate", "cli", "client")
NAME = re.compile(r"TAGURU_[A-Z0-9_]*[A-Z0-9]")


def names_in_code() -> dict[str, str]:
    """Every string literal that is exactly a variable name (how the code reads one), with a file naming it."""
    found: dict[str, str] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and NAME.fullmatch(node.value):
                    found.setdefault(node.value, str(path.relative_to(ROOT)))
    return found


def documented() -> dict[str, list[str]]:
    """The rows of the `## Environment variables` table: name -> [default, meaning]."""
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and (m := re.fullmatch(r"`(TAGURU_[A-Z0-9_]+)`", cells[0])):
            assert m.group(1) not in rows, f"{m.group(1)} is listed twice"
            rows[m.group(1)] = cells[1:]
    return rows


def test_every_variable_the_code_reads_is_documented() -> None:
    code, docs = names_in_code(), documented()
    missing = {name: where for name, where in code.items() if name not in docs}
    assert not missing, f"add these to the table in docs/operations.md: {missing}"


def test_the_table_names_no_variable_the_code_does_not_read() -> None:
    stale = set(documented()) - set(names_in_code())
    assert not stale, f"documented but read nowhere: {sorted(stale)}"


def test_every_name_the_code_reads_is_registered() -> None:
    registered = {v.name for v in REGISTRY}
    missing = {name: where for name, where in names_in_code().items() if name not in registered}
    assert not missing, f"add these to REGISTRY in server/variables.py: {missing}"


def test_the_table_and_the_registry_agree() -> None:
    docs = documented()
    registered = {v.name: v for v in REGISTRY if v.name.startswith(PREFIX)}
    assert not set(registered) - set(docs), f"registered, not in the table: {sorted(set(registered) - set(docs))}"
    assert not set(docs) - set(registered), f"in the table, not registered: {sorted(set(docs) - set(registered))}"
    wrong = {n: (docs[n][0], v.default_text) for n, v in registered.items() if docs[n][0] != v.default_text}
    assert not wrong, f"the table's default differs from the registry's (table, registry): {wrong}"


# the Settings field of each server variable whose typed default the registry states too
FIELDS = {
    "TAGURU_ADDR": "addr",
    "TAGURU_DATA_DIR": "data_dir",
    "TAGURU_DATABASE_URL": "database_url",
    "TAGURU_READ_CONSISTENCY": "read_consistency",
    "TAGURU_WORKERS": "workers",
    "TAGURU_WORKER_START": "worker_start",
    "TAGURU_PRELOAD": "preload",
    "TAGURU_INDEX_DIR": "index_dir",
    "TAGURU_LOG_FORMAT": "log_format",
    "TAGURU_LOG_LEVEL": "log_level",
    "TAGURU_MAX_BODY_BYTES": "max_body_bytes",
    "TAGURU_REQUEST_TIMEOUT_SECS": "request_timeout_secs",
    "TAGURU_HEADER_TIMEOUT_SECS": "header_timeout_secs",
    "TAGURU_MIN_BODY_RATE": "min_body_rate",
    "TAGURU_MAX_CONCURRENT_REQUESTS": "max_concurrent_requests",
    "TAGURU_RATE_LIMIT_PER_MIN": "rate_limit_per_min",
    "TAGURU_AUTH_FAIL_LIMIT_PER_MIN": "auth_fail_limit_per_min",
    "TAGURU_STRICT_TENANCY": "strict_tenancy",
    "TAGURU_EMBED_URL": "embed_url",
    "TAGURU_EMBED_MODEL": "embed_model",
    "TAGURU_EMBED_API_KEY": "embed_api_key",
    "TAGURU_EMBED_TIMEOUT_SECS": "embed_timeout_secs",
    "TAGURU_EMBED_AUTO": "embed_auto",
    "TAGURU_EMBED_PASSAGES": "embed_passages",
    "TAGURU_EMBED_PARALLEL": "embed_parallel",
    "TAGURU_PASSAGE_VECTOR_LIMIT": "passage_vector_limit",
    "TAGURU_FLUSH_SECS": "flush_secs",
    "TAGURU_SEMANTIC_CACHE_THRESHOLD": "semantic_cache_threshold",
}


def test_the_registry_defaults_are_the_settings_defaults() -> None:
    by_name = {v.name: v for v in REGISTRY}
    empty, built = Settings(), load_settings({})
    for name, field in FIELDS.items():
        assert getattr(empty, field) == by_name[name].default == getattr(built, field), name
    assert abs(built.semantic_floor - float(by_name["TAGURU_SEMANTIC_FLOOR"].default)) < 1e-7  # held as an f32


def test_the_defaults_other_modules_state_are_the_registrys() -> None:
    from taguru_server.client.http import DEFAULT_ADDR  # client/ imports nothing of the project: its own copy
    from taguru_server.server.config import bridge_settings
    from taguru_server.server.providers.chat import DEFAULT_EXTRACT_TIMEOUT_SECS
    from taguru_server.server.routes.common import DEFAULT_HEAVY_OPS

    by_name = {v.name: v.default for v in REGISTRY}
    assert DEFAULT_ADDR == by_name["TAGURU_ADDR"]
    assert DEFAULT_EXTRACT_TIMEOUT_SECS == by_name["TAGURU_EXTRACT_TIMEOUT_SECS"]
    assert DEFAULT_HEAVY_OPS == by_name["TAGURU_MAX_CONCURRENT_HEAVY_OPS"]
    bridge = bridge_settings({})
    assert (bridge.url, bridge.timeout, bridge.max_line_bytes, bridge.max_concurrent) == (
        by_name["TAGURU_URL"],
        by_name["TAGURU_MCP_TIMEOUT_SECS"],
        by_name["TAGURU_MCP_MAX_LINE_BYTES"],
        by_name["TAGURU_MCP_MAX_CONCURRENT_TOOLS"],
    )


def test_the_doc_lists_each_variable_under_its_policy() -> None:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    for policy in Policy:
        match = re.search(rf"^- \*\*{policy.value}\*\* [^:]*:(.*?)(?:;|\.)$", section, re.MULTILINE | re.DOTALL)
        assert match, f"docs/operations.md does not explain the policy {policy.value}"
        listed = set(re.findall(r"`(TAGURU_[A-Z0-9_]+)`", match.group(1)))
        registered = {v.name for v in REGISTRY if v.policy is policy and v.name.startswith(PREFIX)}
        assert listed == registered, (policy.value, sorted(listed ^ registered))
    for v in REGISTRY:
        assert v.doc and v.kind in (str, int, float, bool), v.name
