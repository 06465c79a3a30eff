"""The settings of the retrieval cache and its paraphrase tier, the search log, auto-compaction and the
per-context quotas: their parsing and their warning and refusal texts (server/config.py takes the fields)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import numpy as np
import structlog

from taguru_server.server.variables import default_float, default_int

log = structlog.get_logger("taguru.config")
T = TypeVar("T")

_UNSIGNED = re.compile(r"\+?[0-9]+")
_U64_MAX = 2**64 - 1
_F32 = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


@attrs.frozen
class Quota:
    """One context's declared ceilings (TAGURU_CONTEXT_QUOTAS); None: not declared."""

    storage_bytes: int | None = None
    cache_bytes: int | None = None


def parsed(
    env: Mapping[str, str], key: str, parse: Callable[[str], T | None], warning: Callable[[str], str]
) -> T | None:
    """The variable's stripped value as `parse` reads it: None when it is unset or blank, and None after one
    warning (`warning` of the value) when `parse` refuses it (returns None)."""
    text = env.get(key, "").strip()
    if not text:
        return None
    value = parse(text)
    if value is None:
        log.warning(warning(text))
    return value


def unit_f32(text: str) -> float | None:
    """`text` (stripped) as an f32 in [0, 1]; None when it is not a number, NaN or out of range."""
    value = float(np.float32(float(text))) if _F32.fullmatch(text) else math.nan
    return value if 0.0 <= value <= 1.0 else None


def _unit_float(text: str) -> float | None:
    """`text` (stripped) as a float in [0, 1]; None when it is not a number, NaN or out of range."""
    value = float(text) if _F32.fullmatch(text) else math.nan
    return value if 0.0 <= value <= 1.0 else None


def unsigned(text: str) -> int | None:
    """`text` (stripped) as an unsigned 64-bit integer (a leading `+` allowed); None when it is not one."""
    return int(text) if _UNSIGNED.fullmatch(text) and int(text) <= _U64_MAX else None


def semantic_threshold(env: Mapping[str, str]) -> float | None:
    """TAGURU_SEMANTIC_CACHE_THRESHOLD: an f32 in [0, 1]; anything else warns and leaves the tier off."""
    key = "TAGURU_SEMANTIC_CACHE_THRESHOLD"
    return parsed(env, key, unit_f32, lambda text: f"ignoring {key}={text}: not a number between 0 and 1")


def cache_settings(env: Mapping[str, str]) -> dict[str, Any]:
    """The retrieval cache, the search log, auto-compaction and the quotas as Settings fields; a bad value
    warns and keeps its default. The quotas are `serve`'s alone (`parse_quotas`, at its boot)."""
    return {
        "retrieval_cache_bytes": _cache_bytes(env),
        "log_searches": _warned_flag(env, "TAGURU_LOG_SEARCHES", False, "a recognized boolean (1/true or 0/false)"),
        "auto_compact": _warned_flag(env, "TAGURU_AUTO_COMPACT", True, "a recognized boolean (1/true or 0/false)"),
        "auto_compact_ratio": _ratio(env),
    }


def _cache_bytes(env: Mapping[str, str]) -> int:
    key = "TAGURU_RETRIEVAL_CACHE_BYTES"
    default = default_int(key)
    value = parsed(env, key, unsigned, lambda text: f"ignoring {key}={text}: not a number; using {default}")
    if value is None:
        return default
    if value and value // 4 <= 4096:
        log.warning(CACHE_TOO_SMALL, budget_bytes=value, entrance_ceiling_bytes=value // 4)
    return value


CACHE_TOO_SMALL = (
    "TAGURU_RETRIEVAL_CACHE_BYTES is set but too small to admit a realistic response; the exact-match cache will "
    "stay empty and, if TAGURU_SEMANTIC_CACHE_THRESHOLD is also set, the semantic tier will pay a provider call per "
    "request for claims that can only resolve stale"
)


def boolean(text: str) -> bool | None:
    """`text` (stripped) as a boolean: 1/true and 0/false, any case; None for anything else."""
    return {"1": True, "true": True, "0": False, "false": False}.get(text.lower())


def _warned_flag(env: Mapping[str, str], key: str, default: bool, what: str) -> bool:
    """A boolean (1/true, 0/false, any case); anything else warns `ignoring KEY=value: not …; using default`."""
    kept = "true" if default else "false"
    value = parsed(env, key, boolean, lambda text: f"ignoring {key}={text}: not {what}; using {kept}")
    return default if value is None else value


def _ratio(env: Mapping[str, str]) -> float:
    key = "TAGURU_AUTO_COMPACT_RATIO"
    value = parsed(env, key, _unit_float, lambda text: f"ignoring {key}={text}: not a number between 0 and 1")
    return default_float(key) if value is None else value


QUOTA_SHAPE = (
    'TAGURU_CONTEXT_QUOTAS is not the documented JSON shape ({"name": {"storage_bytes": …, "cache_bytes": …}})'
)


class QuotaRefused(Exception):
    """A broken TAGURU_CONTEXT_QUOTAS declaration (the boot is refused)."""


def parse_quotas(raw: str | None) -> dict[str, Quota]:
    """TAGURU_CONTEXT_QUOTAS: one JSON object of context name → {storage_bytes, cache_bytes} (either, at least
    one, unsigned, nothing else); QuotaRefused with the reference's text for anything else."""
    if raw is None:
        return {}
    if not raw.strip():
        raise QuotaRefused("TAGURU_CONTEXT_QUOTAS is set but empty")
    data = json_object(
        raw, lambda why: QuotaRefused(f"{QUOTA_SHAPE}: {why}"), "a map of context names", _quota_constant
    )
    quotas: dict[str, Quota] = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            raise QuotaRefused(f"{QUOTA_SHAPE}: '{name}' must map to an object")
        unknown = sorted(set(entry) - {"storage_bytes", "cache_bytes"})
        if unknown:
            raise QuotaRefused(
                f"{QUOTA_SHAPE}: unknown field `{unknown[0]}`, expected `storage_bytes` or `cache_bytes`"
            )
        for field in ("storage_bytes", "cache_bytes"):
            value = entry.get(field)
            if value is not None and (type(value) is not int or not 0 <= value <= _U64_MAX):
                raise QuotaRefused(f"{QUOTA_SHAPE}: {field} of '{name}' must be an unsigned integer")
        quota = Quota(entry.get("storage_bytes"), entry.get("cache_bytes"))
        if quota.storage_bytes is None and quota.cache_bytes is None:
            raise QuotaRefused(
                f"TAGURU_CONTEXT_QUOTAS declares no ceiling for '{name}' — give it storage_bytes, cache_bytes, "
                "or drop the entry"
            )
        if quota.storage_bytes == 0 or quota.cache_bytes == 0:
            raise QuotaRefused(
                f"TAGURU_CONTEXT_QUOTAS gives '{name}' a zero ceiling, which would refuse every write (storage) or "
                "every residency (cache) — scope keys to read-only via TAGURU_KEY_SCOPES if that is the intent"
            )
        quotas[name] = quota
    return quotas


def json_object(
    raw: str, refused: Callable[[str], Exception], expected: str, parse_constant: Callable[[str], Any] | None = None
) -> dict[str, Any]:
    """A variable's JSON object; `refused(why)` is raised when it does not parse, or parses to another value
    (`expected` names what it should be)."""
    try:
        data = json.loads(raw, parse_constant=parse_constant)
    except ValueError as exc:
        raise refused(str(exc)) from None
    if not isinstance(data, dict):
        raise refused(f"expected {expected}, got {type(data).__name__}")
    return data


def _quota_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number")
