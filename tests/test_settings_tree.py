"""The settings tree: one merge of the environment with the --config file, whose parts the commands take."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from taguru_server.client.config import with_config_file
from taguru_server.server.config import Configuration, load_configuration, load_settings

ROOT = Path(__file__).resolve().parents[1]


def write_config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "taguru.env"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_environment_wins_over_the_file_and_stays_as_read(tmp_path: Path) -> None:
    config = write_config(tmp_path, "TAGURU_ADDR=127.0.0.1:1\nTAGURU_DATA_DIR=from-file\n")
    env = {"TAGURU_ADDR": "127.0.0.1:2"}
    tree = load_configuration(env, config)
    assert tree.environ == env
    assert tree.values == {"TAGURU_ADDR": "127.0.0.1:2", "TAGURU_DATA_DIR": "from-file"}
    assert tree.server() == load_settings(env, config)


def test_taguru_config_names_the_file_when_no_flag_does(tmp_path: Path) -> None:
    config = write_config(tmp_path, "TAGURU_DATA_DIR=from-file\n")
    assert with_config_file({"TAGURU_CONFIG": config}, None)["TAGURU_DATA_DIR"] == "from-file"
    assert load_configuration({"TAGURU_CONFIG": config}).server().data_dir == "from-file"


def test_every_part_reads_the_merged_values(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        "TAGURU_RERANK_URL=http://rerank\nTAGURU_RERANK_MODEL=r\n"
        "TAGURU_EXTRACT_URL=http://chat\nTAGURU_EXTRACT_MODEL=c\nTAGURU_URL=http://bridge:1\n",
    )
    tree = load_configuration({}, config)
    rerank, chat, bridge = tree.rerank(), tree.chat(), tree.bridge()
    assert rerank is not None and (rerank.url, rerank.model) == ("http://rerank", "r")
    assert chat is not None and (chat.url, chat.model) == ("http://chat", "c")
    assert bridge.url == "http://bridge:1"


def test_a_command_without_a_settings_file_ignores_taguru_config(tmp_path: Path) -> None:
    config = write_config(tmp_path, "TAGURU_URL=http://from-file:1\n")
    assert Configuration.without_file({"TAGURU_CONFIG": config}).bridge().url == "http://127.0.0.1:8248"


def test_an_unreadable_file_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        load_configuration({}, str(tmp_path / "missing.env"))


def test_only_the_merge_reads_the_settings_file() -> None:
    """`read_config_file` is called in client/config.py alone (`with_config_file`, the one merge)."""
    callers = []
    for folder in ("cli", "client", "evaluate", "pipeline", "server", "stages", "store"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == (
                    "read_config_file"
                ):
                    callers.append(str(path.relative_to(ROOT)))
    assert sorted(set(callers)) == ["client/config.py"]
