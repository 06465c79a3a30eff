"""The budget stage: item accounting and greedy skip-not-stop admission (docs/evidence.md, "Budgets")."""

from __future__ import annotations

from json.encoder import encode_basestring
from typing import Any, ClassVar

import attrs

from taguru_server.pipeline import Key, Outcome, StageContext
from taguru_server.stages.accounting import measure, overhead, tokens
from taguru_server.stages.cite import Found
from taguru_server.stages.lanes import CITATIONS
from taguru_server.stages.model import (
    NEAR_DUP_OMITTED,
    REQUEST,
    SELECTION,
    TIERED,
    Candidate,
    Fused,
    Omission,
    Selection,
    Unit,
)
from taguru_server.stages.render import citation_out
from taguru_server.store.read.citations import Citation
from taguru_server.store.wire import RawJSON, dumps


def reports_corroboration(cand: Candidate) -> bool:
    """Whether the candidate's item carries a `corroboration` block (its citation_refs a second time)."""
    return cand.kind == "association" and bool(cand.corroborating)


def build_item(fused: Fused, found: dict[tuple[str, int], Citation], contradicts: list[str]) -> dict[str, Any]:
    """The item in wire order, without bytes/estimated_tokens (they are measured on this)."""
    cand = fused.candidate
    refs = [{"source": s, "paragraph": p} for s, p in fused.locators if (s, p) in found]
    item: dict[str, Any] = {
        "candidate_id": cand.candidate_id,
        "kind": cand.kind,
        "fused_rank": fused.fused_rank,
        "lane_ranks": [{"lane": lane, "rank": rank} for lane, rank in fused.lane_ranks],
        "citation_refs": refs,
    }
    if reports_corroboration(cand):  # the attributions are the refs' own entries (nothing mutates them)
        item["corroboration"] = {"sources": list(cand.corroborating), "attributions": list(refs)}
    if contradicts:
        item["contradicts"] = contradicts
    item[cand.kind] = cand.payload
    return item


def citation_entry(locator: tuple[str, int], citation: Citation) -> dict[str, Any]:
    return {"source": locator[0], "paragraph": locator[1], "citation": citation_out(citation)}


def citation_json(locator: tuple[str, int], citation: Citation) -> str:
    """`dumps(citation_entry(...))`, written out directly (it is built for every wanted locator)."""
    enc = encode_basestring
    section = citation.section
    loc = citation.locator
    loc_json = "null" if loc is None else f'{{"kind":{enc(loc.kind)},"value":{enc(loc.value)}}}'
    return (
        f'{{"source":{enc(locator[0])},"paragraph":{locator[1]},"citation":{{"text":{enc(citation.text)},'
        f'"source":{enc(citation.source)},"section":{"null" if section is None else enc(section)},'
        f'"locator":{loc_json}}}}}'
    )


_CITATION_MEMO: dict[tuple[tuple[str, int], Citation], tuple[RawJSON, tuple[int, int]]] = {}
CITATION_MEMO_ENTRIES = 20_000


def measured_citation(loc: tuple[str, int], citation: Citation) -> tuple[RawJSON, tuple[int, int]]:
    """A citation entry's JSON text and its cost, remembered by value (a pure function of both)."""
    key = (loc, citation)
    hit = _CITATION_MEMO.get(key)
    if hit is None:
        if len(_CITATION_MEMO) >= CITATION_MEMO_ENTRIES:
            _CITATION_MEMO.clear()
        text = citation_json(loc, citation)
        hit = _CITATION_MEMO[key] = (RawJSON(text), measure(text))
    return hit


def _measured(item: dict[str, Any], payload_key: str) -> tuple[dict[str, Any], RawJSON, int, int]:
    """Measure the item without bytes/estimated_tokens, then set them; also its final JSON text."""
    head = {k: v for k, v in item.items() if k != payload_key}
    head_json = dumps(head)[:-1]
    payload = item[payload_key]
    payload_json = dumps(payload)
    key = encode_basestring(payload_key)
    size, quarters = measure(f"{head_json},{key}:{payload_json}}}")
    estimated = tokens(quarters)
    out = dict(head)
    out["bytes"] = size
    out["estimated_tokens"] = estimated
    out[payload_key] = payload
    raw = RawJSON(f'{head_json},"bytes":{size},"estimated_tokens":{estimated},{key}:{payload_json}}}')
    return out, raw, size, quarters


REF_FLOOR_BYTES = len('{"source":"","paragraph":0}')  # one citation_refs entry, before its source id's bytes


def _omit(omitted: list[Omission], unit: Unit) -> None:
    reason = "contradiction_group_exceeds_budget" if len(unit.members) > 1 else "budget_exceeded"
    omitted.extend(Omission(m.candidate_id, m.candidate.kind, reason) for m in unit.members)


def refs_floor(unit: Unit, found: dict[tuple[str, int], Citation]) -> int:
    """A lower bound of the unit's item bytes, from its citation_refs alone (a hub's edge has thousands).

    Each found locator's entry is at least its empty form plus one byte per character of its source id
    (JSON escapes only lengthen), entries are separated by commas, and an association that reports
    corroboration carries the same entries again as its attributions.
    """
    total = 0
    floors = found.floors if isinstance(found, Found) else {}
    for member in unit.members:
        known = floors.get(member.candidate_id)
        if known is not None and known[0] is member.locators:
            # the cite stage resolved exactly these locators: every found one is in `found`, no other is
            n, chars = known[1], known[2]
        else:
            n = chars = 0
            for loc in member.locators:
                if loc in found:
                    n += 1
                    chars += len(loc[0])
        if n:
            size = n * REF_FLOOR_BYTES + chars + n - 1
            total += 2 * size if reports_corroboration(member.candidate) else size
    return total


def _built_unit(
    unit: Unit, found: dict[tuple[str, int], Citation]
) -> tuple[list[dict[str, Any]], list[RawJSON], int, int]:
    """A unit's items, their JSON texts, and their summed bytes and token quarters."""
    ids = [m.candidate_id for m in unit.members]
    built = []
    built_json = []
    u_bytes = u_quarters = 0
    for member in unit.members:
        others = sorted(i for i in ids if i != member.candidate_id) if len(ids) > 1 else []
        item, raw, b, q = _measured(build_item(member, found, others), member.candidate.kind)
        built.append(item)
        built_json.append(raw)
        u_bytes += b
        u_quarters += q
    return built, built_json, u_bytes, u_quarters


def admit(
    tiered: tuple[Unit, ...],
    found: dict[tuple[str, int], Citation],
    near_dups: tuple[Omission, ...],
    max_items: int,
    max_bytes: int,
    max_tokens: int,
) -> Selection:
    """Walk the units once; a unit that does not fit is omitted whole and the walk goes on."""
    items: list[dict[str, Any]] = []
    items_json: list[RawJSON] = []
    item_bytes = item_quarters = 0
    committed: dict[tuple[str, int], tuple[int, int]] = {}
    cite_costs: dict[tuple[str, int], tuple[int, int]] = {}
    cite_json: dict[tuple[str, int], RawJSON] = {}

    def cite_cost(loc: tuple[str, int]) -> tuple[int, int]:
        if loc not in cite_costs:
            cite_json[loc], cite_costs[loc] = measured_citation(loc, found[loc])
        return cite_costs[loc]

    cite_bytes = cite_quarters = 0
    omitted: list[Omission] = list(near_dups)
    for unit in tiered:
        if len(items) + len(unit.members) > max_items:
            # cannot fit whatever it costs: omitted without measuring (same outcome, less work)
            _omit(omitted, unit)
            continue
        n_items = len(items) + len(unit.members)
        slack = max_bytes - (overhead(n_items) + item_bytes + overhead(len(committed)) + cite_bytes)
        if refs_floor(unit, found) > slack:
            # the floor check below would refuse it whatever its other bytes: not built at all
            _omit(omitted, unit)
            continue
        built, built_json, u_bytes, u_quarters = _built_unit(unit, found)
        new_cites: dict[tuple[str, int], tuple[int, int]] = {}
        floor_bytes = overhead(n_items) + item_bytes + u_bytes + overhead(len(committed)) + cite_bytes
        floor_quarters = overhead(n_items) + item_quarters + u_quarters + overhead(len(committed)) + cite_quarters
        if floor_bytes > max_bytes or tokens(floor_quarters) > max_tokens:
            # its new citations could only add bytes, tokens and array slots: it cannot fit
            _omit(omitted, unit)
            continue
        for member in unit.members:
            for loc in member.locators:
                if loc in found and loc not in committed and loc not in new_cites:
                    new_cites[loc] = cite_cost(loc)
        n_cites = len(committed) + len(new_cites)
        c_bytes = cite_bytes + sum(b for b, _q in new_cites.values())
        c_quarters = cite_quarters + sum(q for _b, q in new_cites.values())
        total_bytes = overhead(n_items) + item_bytes + u_bytes + overhead(n_cites) + c_bytes
        total_quarters = overhead(n_items) + item_quarters + u_quarters + overhead(n_cites) + c_quarters
        if n_items <= max_items and total_bytes <= max_bytes and tokens(total_quarters) <= max_tokens:
            items.extend(built)
            items_json.extend(built_json)
            item_bytes += u_bytes
            item_quarters += u_quarters
            committed.update(new_cites)
            cite_bytes, cite_quarters = c_bytes, c_quarters
        else:
            _omit(omitted, unit)
    citations = tuple(citation_entry(loc, found[loc]) for loc in sorted(committed))
    n_items, n_cites = len(items), len(committed)
    used_bytes = overhead(n_items) + item_bytes + overhead(n_cites) + cite_bytes
    used_quarters = overhead(n_items) + item_quarters + overhead(n_cites) + cite_quarters
    budget = {
        "items_used": n_items,
        "bytes_used": used_bytes,
        "tokens_used": tokens(used_quarters),
        "limits": {"max_items": max_items, "max_bytes": max_bytes, "max_tokens": max_tokens},
    }
    return Selection(
        tuple(items),
        citations,
        budget,
        tuple(omitted),
        tuple(items_json),
        tuple(cite_json[loc] for loc in sorted(committed)),
    )


@attrs.frozen
class Budget:
    """Admit units greedily under three hard ceilings: items, bytes, tokens."""

    name: ClassVar[str] = "budget"
    requires: ClassVar[tuple[Key[Any], ...]] = (REQUEST, TIERED, CITATIONS, NEAR_DUP_OMITTED)
    provides: ClassVar[tuple[Key[Any], ...]] = (SELECTION,)

    async def run(self, ctx: StageContext) -> Outcome:
        request = ctx[REQUEST]
        selection = admit(
            ctx[TIERED],
            ctx[CITATIONS].value,
            ctx[NEAR_DUP_OMITTED],
            request.max_items,
            request.max_bytes,
            request.max_tokens,
        )
        admitted = len(selection.items)
        return Outcome.ran(
            {SELECTION: selection},
            detail={
                "in": admitted + len(selection.omitted),
                "out": admitted,
                "dropped": len(selection.omitted) - len(ctx[NEAR_DUP_OMITTED]),
            },
        )
