"""What the lanes' replies hold: a search result, an evidence package, a plan, parsed into the
records the case runner scores (a reply of the wrong shape is a `LaneFailed`)."""

from __future__ import annotations

from typing import Any


class LaneFailed(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _parse_hit(h: Any, fallback: bool) -> dict[str, Any]:
    if not isinstance(h, dict):
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    if fallback:
        if "source" not in h:
            raise LaneFailed("a hit is missing 'source'")
        if "paragraph" not in h:
            raise LaneFailed("a hit is missing 'paragraph'")
    ok = isinstance(h.get("source"), str) and type(h.get("paragraph")) is int and h["paragraph"] >= 0
    if not ok:
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    score = h.get("score", 0.0)
    text = h.get("text", "")
    lanes = h.get("lanes", {}) if not fallback else {}
    if not _num(score) or not isinstance(text, str) or not isinstance(lanes, dict):
        raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    kept: dict[str, Any] = {}
    for lane in ("bm25", "vector"):
        ev = lanes.get(lane)
        if ev is None:
            continue
        if not isinstance(ev, dict) or type(ev.get("rank")) is not int or not _num(ev.get("score")):
            raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
        kept[lane] = {"rank": ev["rank"], "score": ev["score"]}
    return {"source": h["source"], "paragraph": h["paragraph"], "score": score, "text": text, "lanes": kept}


def _parse_plan(plan: Any) -> dict[str, Any]:
    bad = LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
    if not isinstance(plan, dict) or not isinstance(plan.get("contexts"), list) or not plan["contexts"]:
        raise bad
    entry = plan["contexts"][0]
    if not isinstance(entry, dict) or not isinstance(entry.get("lanes"), dict):
        raise bad
    out: dict[str, Any] = {"context": entry.get("context")}
    lanes: dict[str, Any] = {}
    for lane in ("bm25", "vector"):
        lp = entry["lanes"].get(lane)
        if not isinstance(lp, dict) or not isinstance(lp.get("ran"), bool):
            raise bad
        kept: dict[str, Any] = {"ran": lp["ran"]}
        for k in ("reason", "floor"):
            if lp.get(k) is not None:
                kept[k] = lp[k]
        lanes[lane] = kept
    out["lanes"] = lanes
    filt = entry.get("filter")
    if isinstance(filt, dict):
        out["filter"] = {"eligible_sources": filt.get("eligible_sources"), "total_sources": filt.get("total_sources")}
    return out


def parse_search(result: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    if isinstance(result, dict) and "plan" in result and "hits" in result:
        if not isinstance(result["hits"], list):
            raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")
        return _parse_plan(result["plan"]), [_parse_hit(h, False) for h in result["hits"]]
    if isinstance(result, list):
        return None, [_parse_hit(h, True) for h in result]
    if isinstance(result, dict) and isinstance(result.get("hits"), list):
        return None, [_parse_hit(h, True) for h in result["hits"]]
    raise LaneFailed("response carries no recognizable hits (plan/hits shape mismatch)")


def stored_hit(h: dict[str, Any]) -> dict[str, Any]:
    """The fields of a hit the artifact keeps."""
    return {"source": h["source"], "paragraph": h["paragraph"], "score": h["score"], "lanes": h["lanes"]}


_PACKAGE_KEYS = ("items", "citations", "budget", "omitted", "omitted_total", "omitted_by_reason", "plan")


def parse_package(result: Any) -> dict[str, Any]:
    def bad(detail: str) -> LaneFailed:
        return LaneFailed(f"response carries no recognizable evidence package ({detail})")

    if not isinstance(result, dict):
        raise bad("the result is not an object")
    for k in _PACKAGE_KEYS:
        if k not in result:
            raise bad(f"missing '{k}'")
    if not isinstance(result["items"], list) or not isinstance(result["citations"], list):
        raise bad("'items' and 'citations' must be arrays")
    budget = result["budget"]
    if not isinstance(budget, dict) or not all(
        type(budget.get(k)) is int for k in ("items_used", "bytes_used", "tokens_used")
    ):
        raise bad("'budget' is not a usage block")
    if type(result["omitted_total"]) is not int or not isinstance(result["omitted_by_reason"], dict):
        raise bad("'omitted_total'/'omitted_by_reason' have the wrong type")
    plan = result["plan"]
    if not isinstance(plan, dict) or not all(isinstance(plan.get(k), dict) for k in ("lanes", "selection", "reranker")):
        raise bad("'plan' lacks lanes/selection/reranker")
    items = []
    for it in result["items"]:
        if (
            not isinstance(it, dict)
            or not isinstance(it.get("candidate_id"), str)
            or not isinstance(it.get("kind"), str)
        ):
            raise bad("an item lacks candidate_id/kind")
        refs = it.get("citation_refs", [])
        if not isinstance(refs, list) or not all(
            isinstance(r, dict) and isinstance(r.get("source"), str) and type(r.get("paragraph")) is int for r in refs
        ):
            raise bad("an item's citation_refs are not locators")
        rec: dict[str, Any] = {
            "candidate_id": it["candidate_id"],
            "kind": it["kind"],
            "fused_rank": it.get("fused_rank"),
        }
        loc = _item_locator(it)
        if loc is not None:
            rec["source"], rec["paragraph"] = loc
        rec["citation_refs"] = [{"source": r["source"], "paragraph": r["paragraph"]} for r in refs]
        items.append(rec)
    return {
        "items": items,
        "budget": budget,
        "omitted_total": result["omitted_total"],
        "omitted_by_reason": result["omitted_by_reason"],
        "plan": plan,
    }


def _item_locator(item: dict[str, Any]) -> tuple[str, int] | None:
    kind = item["kind"]
    if kind == "passage":
        p = item.get("passage")
        if isinstance(p, dict) and isinstance(p.get("source"), str) and type(p.get("paragraph")) is int:
            return p["source"], p["paragraph"]
    if kind in ("passage", "community"):
        parts = item["candidate_id"].split("\u0000")
        if len(parts) >= 4 and parts[-1].isdigit():
            return "\u0000".join(parts[2:-1]), int(parts[-1])
    return None


def top_tier(result: Any) -> tuple[list[str], str | None]:
    """The candidate names of the resolve reply's first tier present (lexical, else semantic), and that tier."""
    if not isinstance(result, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in result):
        raise LaneFailed("resolve answered something other than a list of candidates")
    for tier in ("lexical", "semantic"):
        names = [c["name"] for c in result if c.get("tier") == tier]
        if names:
            return names, tier
    return [], None
