"""Configuration (§1.5, §1.6): keys, scopes, and the configurations the server refuses to boot with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from taguru_server.server.auth import authenticate
from taguru_server.server.config import ConfigError, load_settings


@pytest.mark.parametrize(
    "env",
    [
        {"TAGURU_API_TOKENS": "ci@corp:t1"},
        {"TAGURU_API_TOKENS": "a:t1,a:t2"},
        {"TAGURU_API_TOKENS": "a:t1, b:t1"},
        {"TAGURU_API_TOKEN": "t1", "TAGURU_API_TOKENS": "default:t2"},
        {"TAGURU_API_TOKEN": "t1", "TAGURU_API_TOKENS": "x:t1"},
        {"TAGURU_API_TOKENS": "no-colon"},
        {"TAGURU_API_TOKENS": "a:"},
        {"TAGURU_API_TOKENS": ":t"},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"ghost":"read"}'},
        {"TAGURU_KEY_SCOPES": '{"ci":"read"}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":{"role":"write","contexts":[]}}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":"owner"}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":{"role":"superuser","contexts":["x"]}}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":{"role":"READ"}}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":{"role":"read","contexts":"x"}}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":{"role":"read","contexts":[1]}}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '{"a":5}'},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": "not json"},
        {"TAGURU_API_TOKENS": "a:t1", "TAGURU_KEY_SCOPES": '["a"]'},
        {"TAGURU_MAX_BODY_BYTES": "lots"},
        {"TAGURU_REQUEST_TIMEOUT_SECS": "-1"},
    ],
)
def test_boot_refusals(env: dict[str, str]) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(env)
    # the refusal never echoes a token
    for value in ("t1", "t2"):
        assert f":{value}" not in str(info.value) and f"'{value}'" not in str(info.value)


def test_tokens_trimmed_trailing_comma_and_default_key() -> None:
    s = load_settings({"TAGURU_API_TOKEN": " single ", "TAGURU_API_TOKENS": " ci : t-ci , bot:t-bot ,"})
    assert s.tokens == {"single": "default", "t-ci": "ci", "t-bot": "bot"}
    assert s.auth_enabled
    assert not load_settings({}).auth_enabled
    assert not load_settings({"TAGURU_API_TOKENS": " , "}).auth_enabled


def test_scopes_and_roles() -> None:
    s = load_settings(
        {
            "TAGURU_API_TOKENS": "ci:t-ci,bot:t-bot,root:t-root,w:t-w",
            "TAGURU_KEY_SCOPES": json.dumps(
                {"ci": "read", "bot": {"role": "write", "contexts": ["sake"]}, "w": {"role": "write"}}
            ),
        }
    )
    ci = authenticate(s, ["Bearer t-ci"])
    assert (ci.key, ci.role, ci.contexts) == ("ci", "read", None)
    bot = authenticate(s, ["Bearer t-bot"])
    assert (bot.key, bot.role, bot.contexts) == ("bot", "write", frozenset({"sake"}))
    assert bot.may_access("sake") and not bot.may_access("other")
    root = authenticate(s, ["Bearer t-root"])  # not listed: admin everywhere
    assert (root.key, root.role, root.contexts) == ("root", "admin", None)
    w = authenticate(s, ["Bearer t-w"])
    assert (w.role, w.contexts) == ("write", None)


def test_numeric_settings_and_zero_meanings() -> None:
    s = load_settings({"TAGURU_MAX_BODY_BYTES": "0", "TAGURU_REQUEST_TIMEOUT_SECS": "0", "TAGURU_ADDR": "127.0.0.1:0"})
    assert s.max_body_bytes == 8 * 1024 * 1024 and s.request_timeout_secs == 1
    assert s.host_port == ("127.0.0.1", 0)
    d = load_settings({})
    assert (d.addr, d.data_dir, d.max_body_bytes, d.request_timeout_secs) == ("127.0.0.1:8248", "data", 8388608, 30)


def test_config_file_and_environment_precedence(tmp_path: Path) -> None:
    cfg = tmp_path / "taguru.conf"
    cfg.write_text(
        "# comment\n\nTAGURU_MAX_BODY_BYTES=1234\nTAGURU_API_TOKENS=a:t-file\nTAGURU_DATA_DIR=fromfile\n",
        encoding="utf-8",
    )
    s = load_settings({"TAGURU_CONFIG": str(cfg), "TAGURU_DATA_DIR": "fromenv"})
    assert (s.max_body_bytes, s.data_dir, s.tokens) == (1234, "fromenv", {"t-file": "a"})
    s = load_settings({"TAGURU_MAX_BODY_BYTES": "99"}, config_file=str(cfg))
    assert s.max_body_bytes == 99
    bad = tmp_path / "bad.conf"
    bad.write_text("TAGURU_API_TOKENS=x@y:t\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_settings({}, config_file=str(bad))
