"""Self-contained HTML reports (inline CSS and SVG, no script): one run, or BASE vs HEAD."""

from __future__ import annotations

from html import escape
from typing import Any

from taguru_server.evaluate.metrics import CLASSIFICATION, METRIC_NAMES, case_value

_CSS = (
    "\n"
    'body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans CJK JP",sans-serif;'
    "margin:24px;color:#1d2330;background:#fff}\n"
    "h1{font-size:22px;margin:0 0 4px}"
    "h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d9dde5;padding-bottom:4px}\n"
    ".meta{color:#566074;font-size:13px;margin:2px 0}"
    ".legend span{display:inline-block;margin-right:16px;font-size:13px}\n"
    ".sw{display:inline-block;width:12px;height:12px;border-radius:2px;vertical-align:-1px;margin-right:5px}\n"
    ".base{background:#8a94a8;fill:#8a94a8}.head{background:#2f6fde;fill:#2f6fde}\n"
    "table{border-collapse:collapse;font-size:12.5px;margin-top:6px}"
    "th,td{border:1px solid #d9dde5;padding:4px 7px;text-align:right}\n"
    "th{background:#f2f4f8;position:sticky;top:0}td.l,th.l{text-align:left}"
    "tr:nth-child(even) td{background:#fafbfc}\n"
    ".bars td{border:none;padding:3px 8px;vertical-align:middle}"
    ".bars td.name{text-align:left;font-family:ui-monospace,monospace;font-size:12px}\n"
    ".up{color:#137333;font-weight:600}.down{color:#b3261e;font-weight:600}.na{color:#9aa1ae}\n"
    ".tag{display:inline-block;border-radius:3px;padding:0 5px;font-size:11.5px}"
    ".t-improved{background:#e3f4e8;color:#137333}\n"
    ".t-regressed{background:#fbe5e3;color:#b3261e}.t-added,.t-removed{background:#eef0f4;color:#566074}"
    ".t-unchanged{color:#9aa1ae}\n"
    ".pass{color:#137333;font-weight:600}.fail{color:#b3261e;font-weight:600}"
    "ul.warn{font-size:13px;color:#7a4b00}\n"
)
_W = 320


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 1000 else f"{v:.0f}"
    return escape(str(v))


def _scalar(metrics: dict[str, Any], defs: dict[str, Any], m: str) -> float | None:
    v = metrics.get(m)
    d = defs.get(m) or {}
    if not isinstance(v, dict):
        return None
    x = v.get("mean") if d.get("statistic") == "distribution" else v.get("value")
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _bar_row(name: str, unit: str, values: list[tuple[str, float | None]]) -> str:
    present = [v for _c, v in values if v is not None]
    top = 1.0 if unit == "ratio" else max(present + [1e-9])
    top = max(top, max(present, default=0.0))
    h = 14
    svg_h = h * len(values) + 4 * (len(values) - 1)
    rects = []
    for i, (cls, v) in enumerate(values):
        y = i * (h + 4)
        width = 0 if v is None or top <= 0 else max(1.0, _W * v / top) if v > 0 else 0
        rects.append(f'<rect class="{cls}" x="0" y="{y}" width="{width:.1f}" height="{h}" rx="2"/>')
        rects.append(
            f'<text x="{min(width + 6, _W + 6):.1f}" y="{y + 11}" font-size="11" fill="#1d2330">{_fmt(v)}</text>'
        )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W + 70}" height="{svg_h}" '
        f'role="img" aria-label="{escape(name)}">{"".join(rects)}</svg>'
    )
    return f'<tr><td class="name">{escape(name)}</td><td class="na">{escape(unit)}</td><td>{svg}</td></tr>'


def _metric_bars(runs: list[tuple[str, dict[str, Any]]]) -> str:
    rows = []
    for m in METRIC_NAMES:
        unit = ""
        values = []
        for cls, doc in runs:
            defs = doc.get("definitions") or {}
            unit = unit or (defs.get(m) or {}).get("unit", "")
            values.append((cls, _scalar(doc.get("metrics") or {}, defs, m)))
        if all(v is None for _c, v in values):
            continue
        rows.append(_bar_row(m, unit, values))
    return f'<table class="bars">{"".join(rows)}</table>'


def _run_meta(label: str, doc: dict[str, Any]) -> str:
    inp = doc.get("inputs") or {}
    budget = inp.get("budget")
    btxt = (
        "max_items={max_items} max_bytes={max_bytes} max_tokens={max_tokens}".format(**budget)
        if isinstance(budget, dict)
        else "none (untruncated baseline)"
    )
    t = doc.get("thresholds")
    if isinstance(t, dict):
        verdict = '<span class="pass">PASS</span>' if t.get("passed") else '<span class="fail">FAIL</span>'
        ttxt = f"{verdict} (sha256 {escape(str(t.get('sha256', ''))[:12])}…)"
    else:
        ttxt = "report-only"
    rerank = f" · rerank {escape(str(inp['rerank']))}" if inp.get("rerank") else ""
    return (
        f'<p class="meta"><b>{escape(label)}</b>: mode {escape(str(inp.get("mode")))}{rerank} · context '
        f"{escape(str(inp.get('context')))} · {escape(str(inp.get('url')))} · budget {escape(btxt)} · "
        f"{len(doc.get('cases') or [])} case(s) · generated {escape(str(doc.get('generated_at')))} · "
        f"thresholds {ttxt}</p>"
    )


_COLS = (
    ("recall.recall_at_k", "recall@k"),
    ("recall.mrr", "MRR"),
    ("recall.ndcg", "nDCG"),
    ("coverage.concepts", "concepts"),
    ("coverage.labels", "labels"),
    ("coverage.associations", "assoc."),
    ("citations.recall", "cit. recall"),
    ("citations.locator_validity", "cit. validity"),
    ("diversity.sources", "sources"),
    ("latency.passage_ms", "ms"),
)


def _val(case: dict[str, Any] | None, m: str) -> Any:
    if case is None:
        return None
    try:
        return case_value(case, m)
    except (AttributeError, TypeError, KeyError):
        return None


def _page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f"<style>{_CSS}</style></head><body>{body}</body></html>"
    )


def render_run(doc: dict[str, Any]) -> str:
    cases = doc.get("cases") or []
    parts = [f"<h1>taguru evaluate — {escape(str((doc.get('inputs') or {}).get('mode')))}</h1>", _run_meta("run", doc)]
    if doc.get("warnings"):
        parts.append('<ul class="warn">' + "".join(f"<li>{escape(w)}</li>" for w in doc["warnings"]) + "</ul>")
    parts.append("<h2>Metrics</h2>")
    parts.append('<p class="legend"><span><i class="sw head"></i>this run</span></p>')
    parts.append(_metric_bars([("head", doc)]))
    parts.append(
        "<h2>Cases</h2><table><tr><th class='l'>case</th>"
        + "".join(f"<th>{escape(h)}</th>" for _m, h in _COLS)
        + "<th class='l'>missed</th></tr>"
    )
    for c in cases:
        cells = "".join(f"<td>{_fmt(_val(c, m))}</td>" for m, _h in _COLS)
        missed = "; ".join(c.get("missed") or [])
        if c.get("missed_truncated"):
            missed += f" (+{c['missed_truncated']})"
        parts.append(
            f"<tr><td class='l'>{escape(str(c.get('case_id')))}</td>{cells}<td class='l'>{escape(missed)}</td></tr>"
        )
    parts.append("</table>")
    return _page("taguru evaluate report", "".join(parts))


def render_compare(
    base: dict[str, Any], head: dict[str, Any], header: dict[str, Any], records: list[dict[str, Any]]
) -> str:
    kinds = {r["case_id"]: r["kind"] for r in records}
    c = header["counts"]
    parts = [
        "<h1>taguru evaluate compare</h1>",
        _run_meta("BASE", base),
        _run_meta("HEAD", head),
        f'<p class="meta">{c["improved"]} improved · {c["regressed"]} regressed · {c["added"]} added · '
        f"{c['removed']} removed · {c['unchanged']} unchanged</p>",
    ]
    if header.get("warnings"):
        parts.append('<ul class="warn">' + "".join(f"<li>{escape(w)}</li>" for w in header["warnings"]) + "</ul>")
    parts.append("<h2>Metrics</h2>")
    parts.append(
        '<p class="legend"><span><i class="sw base"></i>BASE</span><span><i class="sw head"></i>HEAD</span></p>'
    )
    parts.append(_metric_bars([("base", base), ("head", head)]))
    bcases = {x.get("case_id"): x for x in base.get("cases") or [] if isinstance(x, dict)}
    hcases = {x.get("case_id"): x for x in head.get("cases") or [] if isinstance(x, dict)}
    cols = [(m, h) for m, h in _COLS if m in CLASSIFICATION]
    parts.append(
        "<h2>Cases</h2><table><tr><th class='l' rowspan='2'>case</th><th class='l' rowspan='2'>change</th>"
        + "".join(f"<th colspan='2'>{escape(h)}</th>" for _m, h in cols)
        + "</tr><tr>"
        + "<th>base</th><th>head</th>" * len(cols)
        + "</tr>"
    )
    for cid in sorted(set(bcases) | set(hcases), key=lambda s: str(s).encode("utf-8")):
        kind = kinds.get(cid, "unchanged")
        cells = []
        for m, _h in cols:
            b, h = _val(bcases.get(cid), m), _val(hcases.get(cid), m)
            cls = ""
            if isinstance(b, (int, float)) and isinstance(h, (int, float)):
                cls = " class='up'" if h - b > 1e-9 else " class='down'" if h - b < -1e-9 else ""
            cells.append(f"<td>{_fmt(b)}</td><td{cls}>{_fmt(h)}</td>")
        parts.append(
            f"<tr><td class='l'>{escape(str(cid))}</td><td class='l'><span class='tag t-{kind}'>{kind}"
            f"</span></td>{''.join(cells)}</tr>"
        )
    parts.append("</table>")
    return _page("taguru evaluate compare", "".join(parts))
