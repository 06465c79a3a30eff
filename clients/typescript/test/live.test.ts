// End-to-end tests against the project's Python server, spawned once for this file.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  Taguru,
  TaguruError,
  type EvidencePackage,
  type ImportBatch,
  type Kind,
  type LaneName,
} from "../src/index.js";
import { REPO_ROOT, startServer, type LiveServer } from "./helpers.js";

// Hermetic: the client falls back to these when base_url/api_key are empty.
delete process.env.TAGURU_URL;
delete process.env.TAGURU_API_TOKEN;

function fixture(name: string): { request: unknown; response: { result?: unknown; [k: string]: unknown }; status: number } {
  const path = join(REPO_ROOT, "tests", "fixtures", "reference", "http", `${name}.json`);
  return JSON.parse(readFileSync(path, "utf8"));
}

let server: LiveServer;
let client: Taguru;

before(async () => {
  server = await startServer();
  client = new Taguru({ base_url: server.url, api_key: "", timeout: 10, retries: 1, backoff_base: 0.05 });
});

after(async () => {
  await server?.stop();
});

describe("assembleEvidence", () => {
  test("budget-constrained package matches the reference (items, budget, exact bytes/tokens)", async () => {
    assert.equal(await client.createContext("budget-corpus"), true);
    const ops = [0, 1, 2, 3, 4].map((i) => ({ subject: `s${i}`, label: "rel", object: `o${i}`, weight: 1.0 }));
    assert.equal(await client.addAssociations("budget-corpus", ops), 5);

    const pkg: EvidencePackage = await client.assembleEvidence("budget-corpus", {
      origins: ["s0", "s1", "s2", "s3", "s4"],
      budget: { max_items: 2 },
    });

    assert.equal(pkg.items.length, 2);
    assert.deepEqual(pkg.budget, {
      items_used: 2,
      bytes_used: 525,
      tokens_used: 132,
      limits: { max_items: 2, max_bytes: 65536, max_tokens: 4000 },
    });
    // evidence.md §7.6: bytes = overhead(n_items) + Σ item bytes + overhead(n_citations), overhead(n) = n ? n + 1 : 2
    const overhead = (n: number) => (n === 0 ? 2 : n + 1);
    assert.equal(
      overhead(pkg.items.length) + pkg.items.reduce((n, it) => n + it.bytes, 0) + overhead(pkg.citations.length),
      pkg.budget.bytes_used,
    );
    const first = pkg.items[0]!;
    assert.equal(first.kind, "association");
    assert.equal(first.candidate_id, "association\u0000s0\u0000rel\u0000o0");
    assert.equal(first.fused_rank, 1);
    assert.deepEqual(first.lane_ranks, [{ lane: "graph_activate", rank: 1 }]);
    assert.deepEqual(first.association, { subject: "s0", label: "rel", object: "o0", weight: 1, count: 1, attributions: [] });
    assert.equal(first.corroboration, undefined);
    assert.equal(first.contradicts, undefined);
    assert.equal(pkg.omitted_total, 3);
    assert.deepEqual(pkg.omitted_by_reason, { budget_exceeded: 3 });
    assert.ok(pkg.omitted.every((o) => o.reason === "budget_exceeded" && o.kind === "association"));
    assert.deepEqual(pkg.plan.lanes.query, { ran: false, reason: "no 'labels' given" });
    assert.deepEqual(pkg.plan.reranker, { configured: false, ran: false });

    // The whole package is parse-equal to the recorded reference response.
    assert.deepEqual(pkg, fixture("evidence_budget_constrained").response.result);
  });

  test("bare-string origins are wrapped; a mixed-lanes package decodes passages and citations", async () => {
    await client.createContext("sake", { description: "evidence wire-contract corpus" });
    await client.storePassages(
      "sake",
      { "docs/kura.md": "青嶺酒造は雲居県霧沢町の蔵元である。杜氏は高瀬である。" },
      { locators: { "docs/kura.md": [{ paragraph: 0, locator: { kind: "page", value: "1" } }] } },
    );
    await client.addAssociations("sake", [
      { subject: "青嶺酒造", label: "杜氏", object: "高瀬", weight: 1.0, source: "docs/kura.md", paragraph: 0 },
    ]);
    const pkg = await client.assembleEvidence("sake", "青嶺酒造");
    const kinds: Kind[] = pkg.items.map((i) => i.kind);
    assert.deepEqual(kinds, ["association", "passage"]);
    assert.equal(pkg.items[1]!.passage?.source, "docs/kura.md");
    assert.equal(pkg.citations[0]!.citation.locator?.kind, "page");
    assert.deepEqual(pkg, fixture("evidence_mixed_lanes").response.result);
  });

  test("budget zero gives an empty package with the limits echoed", async () => {
    const pkg = await client.assembleEvidence("budget-corpus", {
      origins: "s0",
      budget: { max_items: 0, max_bytes: undefined },
    });
    assert.equal(pkg.items.length, 0);
    assert.equal(pkg.budget.bytes_used, 4);
    assert.equal(pkg.budget.tokens_used, 1);
    assert.deepEqual(pkg.budget.limits, { max_items: 0, max_bytes: 65536, max_tokens: 4000 });
  });
});

describe("error envelope", () => {
  test("404 no_context surfaces as a typed TaguruError", async () => {
    const err = await client.assembleEvidence("does-not-exist", { origins: ["x"] }).then(
      () => assert.fail("expected a TaguruError"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TaguruError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "no_context");
    assert.equal(err.message, "context 'does-not-exist' not found");
    assert.equal(typeof err.time, "number");
    assert.deepEqual(err.issues, []);
    assert.equal(err.integrity, undefined);
    const fx = fixture("error_no_context");
    assert.equal(err.status, fx.status);
    assert.equal(err.code, fx.response.code);
    assert.equal(err.message, fx.response.error);
  });

  test("over_limit, already_exists, no_source and no_paragraph codes", async () => {
    const origins = Array.from({ length: 1001 }, (_, i) => `o${i}`);
    await assert.rejects(client.assembleEvidence("budget-corpus", { origins }), {
      name: "TaguruError",
      status: 400,
      code: "over_limit",
      message: "origins carries 1001 items, past the per-request limit of 1000; split the request",
    });
    await assert.rejects(client.createContext("budget-corpus"), { status: 409, code: "already_exists" });
    await assert.rejects(client.cite("sake", "nope.md", 0), { status: 404, code: "no_source" });
    await assert.rejects(client.cite("sake", "docs/kura.md", 9), { status: 404, code: "no_paragraph" });
  });

  test("collected validation carries issues, issues_total, integrity and retryable_after_correction", async () => {
    const err = (await client
      .addAssociations("budget-corpus", [{ subject: "", label: "rel", object: "x", weight: 1.0 }])
      .catch((e: unknown) => e)) as TaguruError;
    assert.ok(err instanceof TaguruError);
    assert.equal(err.status, 400);
    assert.equal(err.code, "invalid_argument");
    assert.equal(err.integrity, "nothing_written");
    assert.equal(err.retryable_after_correction, true);
    assert.equal(err.issues_total, 1);
    assert.deepEqual(err.issues, [
      { path: "associations[0].subject", kind: "empty", expected: "a non-empty string", actual: "an empty string" },
    ]);
    assert.match(err.message, /^the associations batch refused 1 issue\(s\):/);
  });
});

describe("ingest and lanes", () => {
  before(async () => {
    await client.createContext("corpus-a", { description: "wire-contract corpus" });
    await client.addAssociations("corpus-a", [
      { subject: "alpha", label: "connects_to", object: "beta", weight: 2.0, source: "doc.md", paragraph: 0 },
    ]);
    await client.storePassages(
      "corpus-a",
      { "doc.md": "alpha connects to beta." },
      { locators: { "doc.md": [{ paragraph: 0, locator: { kind: "page", value: "1" } }] } },
    );
  });

  test("recall and query match the reference", async () => {
    const expected = fixture("recall").response.result;
    assert.deepEqual(await client.recall("corpus-a", "alpha"), expected);
    assert.deepEqual(await client.query("corpus-a", { subject: "alpha", label: ["connects_to"] }), expected);
  });

  test("activate (string origin wrapped) matches the reference", async () => {
    assert.deepEqual(await client.activate("corpus-a", "alpha"), fixture("activate").response.result);
  });

  test("describe, resolve, cite", async () => {
    assert.deepEqual(await client.describe("corpus-a", "alpha"), {
      concept: "alpha",
      as_subject: [{ label: "connects_to", count: 1 }],
      as_object: [],
    });
    assert.equal(await client.describe("corpus-a", "nobody"), null);
    const cands = await client.resolve("corpus-a", "alpha");
    assert.equal(cands[0]!.name, "alpha");
    assert.equal(cands[0]!.tier, "lexical");
    assert.equal(cands[0]!.kind, "exact");
    assert.equal(cands[0]!.score, 1);
    assert.deepEqual(await client.cite("corpus-a", "doc.md", 0), {
      text: "alpha connects to beta.",
      source: "doc.md",
      section: null,
      locator: { kind: "page", value: "1" },
    });
  });

  test("storePassages and searchPassages match the reference", async () => {
    await client.createContext("corpus-e");
    const stored = await client.storePassages(
      "corpus-e",
      { "doc.md": "導入。\n\n本編。" },
      {
        sections: { "doc.md": [{ paragraph: 1, section: "本編" }] },
        locators: { "doc.md": [{ paragraph: 1, locator: { kind: "page", value: "12" } }] },
      },
    );
    assert.deepEqual(stored, fixture("store_passages").response.result);

    await client.createContext("corpus-c");
    await client.storePassages("corpus-c", { "doc.md": "青嶺酒造は雲居県霧沢町の蔵元である。" });
    const found = await client.searchPassages("corpus-c", "酒造");
    assert.deepEqual(found, fixture("sources_search").response.result);
    assert.equal(found.hits[0]!.lanes.bm25?.rank, 1);
  });

  test("addAliases, getAliases, removeAliases", async () => {
    await client.createContext("corpus-h", { description: "wire-contract aliases corpus" });
    await client.addAssociations("corpus-h", [
      { subject: "PostgreSQL 16", label: "採用", object: "DB", weight: 1.0, source: "doc.md" },
    ]);
    assert.equal(await client.addAliases("corpus-h", { concepts: { Postgres: "PostgreSQL 16" } }), 1);
    assert.deepEqual(await client.getAliases("corpus-h"), fixture("aliases_list").response.result);
    assert.equal(await client.removeAliases("corpus-h", { concepts: ["Postgres"] }), 1);
  });

  test("importBatches: structured batches, then a durable_prefix refusal", async () => {
    const batches: ImportBatch[] = [
      {
        context: "corpus-f",
        source: "doc.md",
        create: { description: "wire-contract import corpus" },
        passage: { text: "導入。\n\n本編。" },
        locators: [{ paragraph: 1, locator: { kind: "page", value: "12" } }],
        associations: [{ subject: "alpha", label: "connects_to", object: "beta", weight: 1.0 }],
      },
    ];
    assert.deepEqual(await client.importBatches(batches), fixture("import").response.result);

    const raw = fixture("import_refusal_durable_prefix");
    const err = (await client.importBatches(raw.request as string).catch((e: unknown) => e)) as TaguruError;
    assert.ok(err instanceof TaguruError);
    assert.equal(err.status, 409);
    assert.equal(err.code, "conflict");
    assert.equal(err.integrity, "durable_prefix");
    assert.equal(err.durable_batches, 1);
    assert.equal(err.retryable_after_correction, true);
    assert.equal(err.message, raw.response.error);
    assert.deepEqual(err.issues, raw.response.issues);
    assert.equal(err.issues_total, 1);
  });

  test("searchCommunities over a hand-built artifact matches the reference", async () => {
    await client.createContext("corpus-d");
    await client.addAssociations("corpus-d", [{ subject: "a1", label: "近い", object: "a2", weight: 2.0 }]);
    const rev = (await client.getContext("corpus-d")).revision!;
    const manifest =
      `{"algorithm":"louvain-cc/1","communities":[{"concept_count":2,"fingerprint":"00aa00aa00aa00aa","id":"L0-0","level":0}],` +
      `"levels":1,"revision":{"config":${rev.config},"graph":${rev.graph},"passages":${rev.passages}},` +
      `"source_context":"corpus-d","taguru_communities":1}`;
    await client.createContext("corpus-d::communities");
    await client.storePassages("corpus-d::communities", {
      "communities:manifest": manifest,
      "community:L0-0": "この共同体のテーマは酒造りの歴史です。",
    });
    await client.addAssociations("corpus-d::communities", [
      { subject: "community:L0-0", label: "contains", object: "a1", weight: 6.0 },
      { subject: "community:L0-0", label: "contains", object: "a2", weight: 4.0 },
    ]);
    const res = await client.searchCommunities("corpus-d", "酒造りの歴史");
    assert.deepEqual(res, fixture("communities_search").response.result);
    await assert.rejects(client.searchCommunities("corpus-a", "x"), { status: 404, code: "no_context" });
  });

  test("listContexts and getContext", async () => {
    const list = await client.listContexts({ limit: 1000 });
    const names = list.contexts.map((c) => c.name);
    assert.ok(names.includes("corpus-a") && names.includes("budget-corpus"));
    assert.deepEqual([...names].sort(), names, "sorted by name");
    assert.equal(list.total, names.length);
    const one = await client.listContexts({ limit: 1, after: "corpus-a" });
    assert.equal(one.contexts.length, 1);
    assert.ok(one.contexts[0]!.name > "corpus-a");

    const entry = await client.getContext("corpus-a");
    assert.equal(entry.name, "corpus-a");
    assert.equal(entry.description, "wire-contract corpus");
    assert.equal(entry.stats.associations, 1);
    assert.deepEqual(entry.stats.top_concepts, [
      { label: "alpha", count: 1 },
      { label: "beta", count: 1 },
    ]);
    assert.equal(typeof entry.usage.reads, "number");
    await assert.rejects(client.getContext("nope"), { status: 404, code: "no_context" });
  });

  test("context names travel as one percent-encoded path segment", async () => {
    const name = "a::b/c 酒?#%";
    assert.equal(await client.createContext(name, { description: "odd name" }), true);
    const entry = await client.getContext(name);
    assert.equal(entry.name, name);
    assert.equal(entry.description, "odd name");
    await client.addAssociations(name, [{ subject: "x", label: "y", object: "z", weight: 1 }]);
    const pkg = await client.assembleEvidence(name, { origins: "x" });
    const lanes: LaneName[] = pkg.items.flatMap((i) => i.lane_ranks.map((l) => l.lane));
    assert.ok(lanes.includes("graph_activate"));
  });

  test("probes", async () => {
    assert.equal(await client.live(), "ok");
    assert.equal((await client.health()).status, "ok");
    const v = await client.version();
    assert.deepEqual(v.http_contract, { current: 1, supported: [1] });
  });
});

describe("bearer token", () => {
  let authed: LiveServer;
  before(async () => {
    authed = await startServer({ TAGURU_API_TOKEN: "s3cret" });
  });
  after(async () => {
    await authed?.stop();
  });

  test("requests carry Authorization: Bearer; a missing token is 401 unauthorized", async () => {
    const anon = new Taguru({ base_url: authed.url, api_key: "", retries: 0 });
    await assert.rejects(anon.listContexts(), { status: 401, code: "unauthorized" });
    const bad = new Taguru({ base_url: authed.url, api_key: "wrong", retries: 0 });
    await assert.rejects(bad.listContexts(), { status: 401, code: "unauthorized" });
    const good = new Taguru({ base_url: authed.url, api_key: "s3cret", retries: 0 });
    assert.equal(await good.createContext("auth-corpus"), true);
    assert.equal((await good.listContexts()).total, 1);
  });
});
