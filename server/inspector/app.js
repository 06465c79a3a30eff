// The evidence inspector: builds an evidence request, calls this server's API and renders the package.
// Every value from the server reaches the page as text nodes (textContent / append), never as markup.
"use strict";

(() => {
  const TOKEN_KEY = "taguru.inspector.token";
  // the server root, also when the server sits behind a path prefix (/prefix/ui -> /prefix/)
  const API_BASE = new URL(".", window.location.href);
  const LIST_PARAMS = ["origins", "labels"];
  const BUDGET_PARAMS = ["max_items", "max_bytes", "max_tokens"];
  let memoryToken = null; // used when session storage is unavailable

  // ----- DOM helpers -------------------------------------------------------------------------

  const $ = (id) => document.getElementById(id);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = String(value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : String(child));
    }
    return node;
  }

  function table(caption, headers, rows, className) {
    const head = el("tr", null, headers.map((h) => el("th", { scope: "col", text: h })));
    // a wide table scrolls inside its own box on a narrow screen
    return el(
      "div",
      { class: "scroll" },
      el("table", { class: className || null }, el("caption", { text: caption }), el("thead", null, head), el("tbody", null, rows)),
    );
  }

  function section(id, title, ...children) {
    return el("section", { id, "aria-labelledby": id + "-title" }, el("h2", { id: id + "-title", text: title }), children);
  }

  const fmt = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n));
  const showId = (id) => String(id).split("\u0000").join(" \u2400 ");
  const ref = (r) => `${r.source} \u00b6${r.paragraph}`;

  // ----- the token -----------------------------------------------------------------------------

  function getToken() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || memoryToken;
    } catch (_err) {
      return memoryToken;
    }
  }

  function setToken(token) {
    memoryToken = token || null;
    try {
      if (token) window.sessionStorage.setItem(TOKEN_KEY, token);
      else window.sessionStorage.removeItem(TOKEN_KEY);
    } catch (_err) {
      // storage disabled: the token lives in memory for this page only
    }
    $("forget").hidden = !getToken();
  }

  // `#token=…` in a link: stored for this tab, then removed from the address bar and history entry
  function takeTokenFromFragment() {
    const fragment = new URLSearchParams(window.location.hash.slice(1));
    if (!fragment.has("token")) return;
    const token = fragment.get("token");
    fragment.delete("token");
    if (token) setToken(token);
    const rest = fragment.toString();
    const url = window.location.pathname + window.location.search + (rest ? "#" + rest : "");
    window.history.replaceState(null, "", url);
  }

  function askForToken(message) {
    $("auth-message").textContent = message;
    $("auth").hidden = false;
    document.body.dataset.state = "auth";
    $("token").focus();
  }

  // ----- the API -------------------------------------------------------------------------------

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    const token = getToken();
    if (token) headers.Authorization = "Bearer " + token;
    const init = { method, headers, cache: "no-store", credentials: "omit" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const started = performance.now();
    const resp = await fetch(new URL(path, API_BASE), init);
    const text = await resp.text();
    let parsed = null;
    try {
      parsed = JSON.parse(text);
    } catch (_err) {
      parsed = null;
    }
    return { status: resp.status, body: parsed, headers: resp.headers, elapsed: performance.now() - started };
  }

  // a refusal the page explains itself (auth), or null for one to show as an error
  function authProblem(reply) {
    const message = reply.body && typeof reply.body.error === "string" ? reply.body.error : "";
    if (reply.status === 401) {
      setToken(null);
      askForToken(
        !reply.hadToken
          ? "This server requires an API token (401 unauthorized). Enter a token with at least the read role."
          : "The token was not accepted (401 unauthorized). Enter another token.",
      );
      return true;
    }
    if (reply.status === 403) {
      showError(`Forbidden (403): ${message || "this token may not make this call"}.`);
      $("auth").hidden = false;
      $("auth-message").textContent = "The token is valid but lacks the role or context grant for this call.";
      return true;
    }
    return false;
  }

  async function call(method, path, body) {
    const hadToken = Boolean(getToken());
    const reply = await api(method, path, body);
    reply.hadToken = hadToken;
    return reply;
  }

  // ----- the request: form <-> query string <-> body --------------------------------------------

  function splitList(value) {
    return value
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s.length > 0);
  }

  function fillForm(params) {
    $("context").value = params.get("context") || "";
    for (const name of LIST_PARAMS) {
      const values = params.getAll(name);
      // repeated parameters are one value each; a single one is comma-separated
      $(name).value = values.length > 1 ? values.join(", ") : values[0] || "";
    }
    $("query").value = params.get("query") || "";
    for (const name of BUDGET_PARAMS) $(name).value = params.get(name) || "";
    const rerank = params.get("rerank");
    $("rerank").checked = rerank !== null && rerank !== "false" && rerank !== "0";
    $("rerank_model").value = rerank && !["1", "true", "false", "0"].includes(rerank) ? rerank : "";
    const communities = params.get("communities");
    $("communities").checked = communities === "1" || communities === "true";
  }

  function formParams() {
    const params = new URLSearchParams();
    params.set("context", $("context").value.trim());
    for (const name of [...LIST_PARAMS, "query", ...BUDGET_PARAMS]) {
      const value = $(name).value.trim();
      if (value) params.set(name, value);
    }
    if ($("rerank").checked) params.set("rerank", $("rerank_model").value.trim() || "1");
    if ($("communities").checked) params.set("communities", "1");
    return params;
  }

  function requestBody() {
    const body = { origins: splitList($("origins").value), explain: true };
    const labels = splitList($("labels").value);
    if (labels.length) body.labels = labels;
    if ($("query").value.trim()) body.text_fallback_query = $("query").value.trim();
    const budget = {};
    for (const name of BUDGET_PARAMS) {
      const raw = $(name).value.trim();
      if (raw !== "") budget[name] = Number(raw);
    }
    if (Object.keys(budget).length) body.budget = budget;
    if ($("rerank").checked) {
      const model = $("rerank_model").value.trim();
      body.rerank = model ? { model } : {};
    }
    if ($("communities").checked) body.include_communities = true;
    return body;
  }

  // ----- status and errors ---------------------------------------------------------------------

  function setStatus(text) {
    $("status").textContent = text;
  }

  function showError(text) {
    const box = $("error");
    box.textContent = text;
    box.hidden = false;
    document.body.dataset.state = "error";
  }

  function clearError() {
    $("error").textContent = "";
    $("error").hidden = true;
  }

  // ----- rendering -----------------------------------------------------------------------------

  function parseServerTiming(value) {
    const durations = new Map();
    for (const part of (value || "").split(",")) {
      const [name, ...fields] = part.trim().split(";");
      for (const field of fields) {
        const [key, raw] = field.trim().split("=");
        if (key === "dur" && name) durations.set(name, Number(raw));
      }
    }
    return durations;
  }

  function summary(context, pkg, reply) {
    const server = reply.body && typeof reply.body.time === "number" ? `${(reply.body.time * 1000).toFixed(1)} ms` : "?";
    return el(
      "p",
      { class: "summary", id: "summary" },
      `Context “${context}”: ${fmt(pkg.items.length)} items, ${fmt(pkg.citations.length)} citations, `,
      `${fmt(pkg.omitted_total)} omitted. Server ${server}, round trip ${reply.elapsed.toFixed(1)} ms.`,
    );
  }

  function bar(label, used, limit) {
    const share = limit > 0 ? Math.min(used / limit, 1) : used > 0 ? 1 : 0;
    const fill = el("span", { class: "fill" + (used > limit ? " over" : "") });
    fill.style.width = `${(share * 100).toFixed(1)}%`;
    const pct = limit > 0 ? ` (${Math.round((used / limit) * 100)}%)` : "";
    return el(
      "div",
      { class: "bar-row" },
      el("span", { class: "bar-label", id: `bar-${label}`, text: label }),
      el(
        "span",
        {
          class: "bar",
          role: "meter",
          "aria-labelledby": `bar-${label}`,
          "aria-valuemin": 0,
          "aria-valuemax": limit,
          "aria-valuenow": Math.min(used, limit),
          "aria-valuetext": `${used} of ${limit}`,
        },
        fill,
      ),
      el("span", { class: "bar-value", text: `${fmt(used)} / ${fmt(limit)}${pct}` }),
    );
  }

  function budgetSection(budget) {
    const limits = budget.limits || {};
    return section(
      "budget",
      "Budget used",
      bar("items", budget.items_used, limits.max_items),
      bar("bytes", budget.bytes_used, limits.max_bytes),
      bar("tokens", budget.tokens_used, limits.max_tokens),
    );
  }

  function stageCounts(stage) {
    return Object.entries(stage)
      .filter(([key, value]) => !["stage", "status", "reason", "duration_ms", "ms"].includes(key) && typeof value !== "object")
      .map(([key, value]) => `${key} ${value}`)
      .join(" · ");
  }

  function stagesSection(stages, timing) {
    const times = stages.map((s) => {
      const own = typeof s.duration_ms === "number" ? s.duration_ms : typeof s.ms === "number" ? s.ms : undefined;
      return own !== undefined ? own : timing.has(s.stage) ? timing.get(s.stage) : null;
    });
    const total = times.reduce((sum, t) => sum + (t || 0), 0);
    let start = 0;
    const rows = stages.map((stage, i) => {
      const ms = times[i];
      const track = el("span", { class: "track", "aria-hidden": "true" });
      if (ms !== null && total > 0) {
        const span = el("span", { class: `span status-${stage.status}` });
        span.style.left = `${((start / total) * 100).toFixed(2)}%`;
        span.style.width = `${Math.max((ms / total) * 100, 0.4).toFixed(2)}%`;
        track.append(span);
        start += ms;
      }
      return el(
        "tr",
        { "data-stage": stage.stage },
        el("th", { scope: "row", class: "stage-name", text: stage.stage }),
        el("td", null, el("span", { class: `badge status-${stage.status}`, text: stage.status })),
        el("td", { class: "reason", text: stage.reason || "" }),
        el("td", { class: "counts", text: stageCounts(stage) }),
        el("td", { class: "num", text: ms === null ? "–" : ms.toFixed(3) }),
        el("td", { class: "waterfall" }, track),
      );
    });
    const note = timing.size ? `${total.toFixed(3)} ms in stages (Server-Timing)` : "no Server-Timing header";
    return section(
      "stages",
      "Stages",
      table(`plan.stages in plan order; ${note}`, ["Stage", "Status", "Reason", "Counts", "Time (ms)", "Waterfall"], rows, "stages"),
    );
  }

  function contradictionGroups(items) {
    const groups = new Map();
    for (const item of items) {
      if (!item.contradicts || !item.contradicts.length) continue;
      const key = [item.candidate_id, ...item.contradicts].sort().join("\n");
      if (!groups.has(key)) groups.set(key, groups.size + 1);
      item._group = groups.get(key);
    }
    return groups.size;
  }

  function evidenceCell(item) {
    if (item.association) {
      const a = item.association;
      return el(
        "td",
        { class: "evidence" },
        el("span", { class: "triple" }, el("b", { text: a.subject }), " · ", a.label, " → ", el("b", { text: a.object })),
        el("span", { class: "meta", text: ` weight ${a.weight}, count ${a.count}` }),
      );
    }
    if (item.passage) {
      const p = item.passage;
      return el(
        "td",
        { class: "evidence" },
        el("span", { class: "meta", text: `${ref(p)} · score ${p.score}` }),
        el("span", { class: "text", title: p.text, text: p.text }),
      );
    }
    if (item.community) {
      const c = item.community;
      const where = c.community !== undefined ? `community:${c.community}` : "community";
      return el(
        "td",
        { class: "evidence" },
        el("span", { class: "meta", text: `${where}${c.level !== undefined ? ` level ${c.level}` : ""} · score ${c.score}` }),
        el("span", { class: "text", title: c.text || "", text: c.text || "" }),
      );
    }
    return el("td", { class: "evidence", text: showId(item.candidate_id) });
  }

  function itemSources(item) {
    const sources = new Set();
    if (item.passage) sources.add(item.passage.source);
    if (item.community && item.community.community !== undefined) sources.add(`community:${item.community.community}`);
    if (item.association) for (const a of item.association.attributions || []) sources.add(a.source);
    return [...sources];
  }

  function itemsSection(items) {
    const groups = contradictionGroups(items);
    const rows = items.map((item) => {
      const refs = item.citation_refs || [];
      const corroboration = item.corroboration
        ? `${item.corroboration.sources.length} source${item.corroboration.sources.length === 1 ? "" : "s"}: ${item.corroboration.sources.join(", ")}`
        : "";
      return el(
        "tr",
        { "data-fused-rank": item.fused_rank, "data-kind": item.kind, class: item._group ? "grouped" : null },
        el("th", { scope: "row", class: "num", text: item.fused_rank }),
        el("td", null, el("span", { class: `badge kind-${item.kind}`, text: item.kind })),
        evidenceCell(item),
        el("td", { class: "lanes" }, (item.lane_ranks || []).map((r) => el("span", { class: "chip", text: `${r.lane} #${r.rank}` }))),
        el(
          "td",
          { class: "sources" },
          el("span", { class: "source-list" }, itemSources(item).map((s) => el("span", { class: "source", text: s }))),
          refs.length ? el("span", { class: "refs" }, refs.map((r) => el("span", { class: "chip ref", text: ref(r) }))) : null,
        ),
        el("td", { class: "corroboration", text: corroboration }),
        el(
          "td",
          { class: "contradicts" },
          item._group
            ? el("span", {
                class: "badge group",
                title: item.contradicts.map(showId).join("\n"),
                text: `group ${item._group} (${item.contradicts.length} other${item.contradicts.length === 1 ? "" : "s"})`,
              })
            : "",
        ),
        el("td", { class: "num", text: fmt(item.bytes) }),
        el("td", { class: "num", text: fmt(item.estimated_tokens) }),
      );
    });
    const caption = `${items.length} items in admission order${groups ? `, ${groups} contradiction group${groups === 1 ? "" : "s"}` : ""}`;
    return section(
      "items",
      "Items",
      table(
        caption,
        ["Fused rank", "Kind", "Evidence", "Lane ranks", "Sources and citation refs", "Corroboration", "Contradiction", "Bytes", "Tokens"],
        rows,
        "items",
      ),
    );
  }

  function citationsSection(citations) {
    const rows = citations.map((c) => {
      const loc = c.citation && c.citation.locator ? `${c.citation.locator.kind} ${c.citation.locator.value}` : "";
      return el(
        "tr",
        null,
        el("th", { scope: "row", class: "mono", text: c.source }),
        el("td", { class: "num", text: c.paragraph }),
        el("td", { text: (c.citation && c.citation.section) || "" }),
        el("td", { text: loc }),
        el("td", { class: "text-full", text: (c.citation && c.citation.text) || "" }),
      );
    });
    return section("citations", "Citations", table(`${citations.length} cited paragraphs`, ["Source", "¶", "Section", "Locator", "Text"], rows));
  }

  function omittedSection(pkg) {
    const reasons = Object.entries(pkg.omitted_by_reason || {}).map(([reason, count]) =>
      el("tr", null, el("th", { scope: "row", text: reason }), el("td", { class: "num", text: fmt(count) })),
    );
    const listed = (pkg.omitted || []).map((o) =>
      el(
        "tr",
        null,
        el("td", { class: "id", text: showId(o.candidate_id) }),
        el("td", { text: o.kind }),
        el("td", { text: o.reason }),
        el("td", { class: "id", text: o.duplicate_of ? showId(o.duplicate_of) : "" }),
      ),
    );
    return section(
      "omitted",
      "Omitted",
      table(`${fmt(pkg.omitted_total)} omitted, by reason`, ["Reason", "Count"], reasons, "compact"),
      listed.length
        ? el(
            "details",
            null,
            el("summary", { text: `The first ${listed.length} of ${fmt(pkg.omitted_total)}` }),
            table("Omitted candidates", ["Candidate", "Kind", "Reason", "Duplicate of"], listed),
          )
        : null,
    );
  }

  function planSection(plan) {
    const lanes = Object.entries(plan.lanes || {}).map(([lane, p]) =>
      el(
        "tr",
        null,
        el("th", { scope: "row", text: lane }),
        el("td", { text: p.ran ? "ran" : "did not run" }),
        el("td", { class: "reason", text: p.reason || "" }),
      ),
    );
    const sel = plan.selection || {};
    const rr = plan.reranker || {};
    const facts = [
      ["dedup dropped", sel.dedup_dropped],
      ["contradiction groups", sel.contradiction_groups],
      ["diversity tier width", sel.diversity_tier_width],
      ["reranker", `${rr.configured ? "configured" : "not configured"}, ${rr.ran ? `ran (${rr.model})` : "did not run"}${rr.reason ? ` — ${rr.reason}` : ""}`],
    ];
    return section(
      "plan",
      "Plan",
      table("plan.lanes", ["Lane", "Ran", "Reason"], lanes, "compact"),
      el("dl", { class: "facts" }, facts.map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v === undefined ? "" : v })])),
    );
  }

  function rawSection(reply) {
    return el(
      "details",
      { class: "raw" },
      el("summary", { text: "Raw response" }),
      el("pre", { text: JSON.stringify(reply.body, null, 2) }),
    );
  }

  function render(context, reply) {
    const pkg = reply.body.result;
    const timing = parseServerTiming(reply.headers.get("Server-Timing"));
    const results = $("results");
    results.replaceChildren(
      summary(context, pkg, reply),
      budgetSection(pkg.budget),
      stagesSection((pkg.plan && pkg.plan.stages) || [], timing),
      itemsSection(pkg.items),
      citationsSection(pkg.citations),
      omittedSection(pkg),
      planSection(pkg.plan || {}),
      rawSection(reply),
    );
  }

  // ----- flows ---------------------------------------------------------------------------------

  async function loadContexts() {
    let reply;
    try {
      reply = await call("GET", "contexts?limit=1000");
    } catch (_err) {
      showError("The server could not be reached.");
      return false;
    }
    if (authProblem(reply)) return false;
    if (reply.status !== 200 || !reply.body || !reply.body.result) return true;
    const names = reply.body.result.contexts.map((c) => el("option", { value: c.name }));
    $("context-names").replaceChildren(...names);
    if (!$("context").value && names.length === 1) $("context").value = reply.body.result.contexts[0].name;
    return true;
  }

  async function run() {
    const context = $("context").value.trim();
    if (!context) {
      setStatus("Choose a context.");
      return;
    }
    clearError();
    document.body.dataset.state = "loading";
    setStatus(`Assembling evidence from “${context}”…`);
    let reply;
    try {
      reply = await call("POST", `contexts/${encodeURIComponent(context)}/evidence`, requestBody());
    } catch (_err) {
      setStatus("");
      showError("The server could not be reached.");
      return;
    }
    if (authProblem(reply)) {
      setStatus("");
      return;
    }
    if (reply.status !== 200 || !reply.body || !reply.body.result) {
      setStatus("");
      const code = reply.body && reply.body.code ? ` ${reply.body.code}` : "";
      const message = reply.body && reply.body.error ? `: ${reply.body.error}` : "";
      showError(`The server answered ${reply.status}${code}${message}`);
      return;
    }
    $("auth").hidden = true;
    render(context, reply);
    setStatus(`Evidence package from “${context}”.`);
    document.body.dataset.state = "done";
  }

  async function start() {
    takeTokenFromFragment();
    $("forget").hidden = !getToken();
    const params = new URLSearchParams(window.location.search);
    fillForm(params);
    $("request").addEventListener("submit", (event) => {
      event.preventDefault();
      const query = formParams().toString();
      window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
      run();
    });
    $("auth-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const token = $("token").value.trim();
      $("token").value = "";
      if (!token) return;
      setToken(token);
      $("auth").hidden = true;
      document.body.dataset.state = "idle";
      if ((await loadContexts()) && $("context").value.trim()) await run();
    });
    $("forget").addEventListener("click", () => {
      setToken(null);
      setStatus("The token was forgotten.");
    });
    const reachable = await loadContexts();
    if (reachable && params.get("context")) await run();
  }

  start();
})();
