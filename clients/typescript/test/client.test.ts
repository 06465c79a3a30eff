// Client behaviour against tiny local node:http servers: retries, decoding, headers, probe.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  IncompatibleServerError,
  ResponseShapeError,
  Taguru,
  TaguruError,
  TransportError,
  encodeContextName,
  parseRetryAfter,
  serializeImport,
  type EvidencePackage,
  type Kind,
  type LaneName,
  type OmitReason,
  type RerankerReason,
  type ErrorCode,
} from "../src/index.js";
import { fakeServer, freePort, ok, sendJson } from "./helpers.js";

// Hermetic: the client falls back to these when base_url/api_key are empty.
delete process.env.TAGURU_URL;
delete process.env.TAGURU_API_TOKEN;

const FAST = { backoff_base: 0.01, backoff_max: 0.05, timeout: 5 } as const;

function evidenceWith(kind: string, lane: string): EvidencePackage {
  return {
    items: [
      {
        candidate_id: `${kind}\u0000x`,
        kind,
        fused_rank: 1,
        lane_ranks: [{ lane, rank: 1 }],
        citation_refs: [],
        bytes: 10,
        estimated_tokens: 3,
        hologram: { depth: 3 },
      } as EvidencePackage["items"][number],
    ],
    citations: [],
    budget: { items_used: 1, bytes_used: 15, tokens_used: 4, limits: { max_items: 40, max_bytes: 65536, max_tokens: 4000 } },
    omitted: [{ candidate_id: "y", kind, reason: "too_shiny" }],
    omitted_total: 1,
    omitted_by_reason: { too_shiny: 1 },
    plan: {
      lanes: {
        resolve: { ran: true },
        query: { ran: false, reason: "no 'labels' given" },
        activate: { ran: true },
        passages: { ran: true },
        communities: { ran: false, reason: "include_communities was false" },
        citations: { ran: true },
      },
      selection: { dedup_dropped: 0, contradiction_groups: 0, diversity_tier_width: 1 },
      reranker: { configured: true, ran: false, reason: "quantum_decoherence" },
    },
  };
}

describe("open enums", () => {
  test("unknown kind, lane, omit reason and reranker reason decode cleanly and stay typed", async () => {
    const srv = await fakeServer((_req, res) => sendJson(res, 200, ok(evidenceWith("hypergraph", "graph_dream"))));
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      const pkg = await client.assembleEvidence("ctx", { origins: ["a"] });
      const item = pkg.items[0]!;
      // Compile-time: newer wire values are assignable to the Open<> types…
      const kind: Kind = item.kind;
      const lane: LaneName = item.lane_ranks[0]!.lane;
      const reason: OmitReason = pkg.omitted[0]!.reason;
      const rr: RerankerReason | undefined = pkg.plan.reranker.reason;
      const future: Kind = "some_future_kind";
      const code: ErrorCode = "brand_new_code";
      // …and known literals still narrow.
      const describeKind = (k: Kind): string => {
        switch (k) {
          case "association":
          case "passage":
          case "community":
            return "known";
          default:
            return `unknown:${k}`;
        }
      };
      assert.equal(kind, "hypergraph");
      assert.equal(describeKind(kind), "unknown:hypergraph");
      assert.equal(describeKind("passage"), "known");
      assert.equal(lane, "graph_dream");
      assert.equal(reason, "too_shiny");
      assert.equal(rr, "quantum_decoherence");
      assert.equal(pkg.omitted_by_reason["too_shiny"], 1);
      assert.equal(future, "some_future_kind");
      assert.equal(code, "brand_new_code");
      // Unknown keys pass through untouched (no runtime validation).
      assert.deepEqual((item as unknown as { hologram: unknown }).hologram, { depth: 3 });
    } finally {
      await srv.close();
    }
  });

  test("an unknown error code surfaces as-is on TaguruError", async () => {
    const srv = await fakeServer((_req, res) =>
      sendJson(res, 418, { status: "error", code: "teapot_overflow", error: "short and stout", time: 0.5 }),
    );
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      await assert.rejects(client.listContexts(), (e: unknown) => {
        assert.ok(e instanceof TaguruError);
        assert.equal(e.status, 418);
        assert.equal(e.code, "teapot_overflow");
        assert.equal(e.message, "short and stout");
        assert.equal(e.time, 0.5);
        return true;
      });
    } finally {
      await srv.close();
    }
  });
});

describe("retries", () => {
  test("503 then 200: retried and succeeds (Retry-After: 0 honoured)", async () => {
    let n = 0;
    const srv = await fakeServer((_req, res) => {
      n++;
      if (n === 1) {
        sendJson(res, 503, { status: "error", code: "overloaded", error: "busy", time: 0 }, { "retry-after": "0" });
      } else {
        sendJson(res, 200, ok({ total: 0, contexts: [] }));
      }
    });
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      assert.deepEqual(await client.listContexts(), { total: 0, contexts: [] });
      assert.equal(srv.requests.length, 2);
      assert.deepEqual(
        srv.requests.map((r) => `${r.method} ${r.url}`),
        ["GET /contexts", "GET /contexts"],
      );
    } finally {
      await srv.close();
    }
  });

  test("503 without Retry-After uses bounded exponential backoff", async () => {
    let n = 0;
    const srv = await fakeServer((_req, res) => {
      n++;
      if (n <= 2) sendJson(res, 503, { status: "error", code: "overloaded", error: "busy", time: 0 });
      else sendJson(res, 200, ok(true));
    });
    try {
      const client = new Taguru({ base_url: srv.url, retries: 2, ...FAST });
      const t0 = Date.now();
      assert.equal(await client.createContext("x"), true);
      assert.equal(srv.requests.length, 3);
      assert.ok(Date.now() - t0 < 2000);
    } finally {
      await srv.close();
    }
  });

  test("429 honours Retry-After seconds", async () => {
    let n = 0;
    const srv = await fakeServer((_req, res) => {
      n++;
      if (n === 1) sendJson(res, 429, { status: "error", code: "rate_limited", error: "slow down", time: 0 }, { "retry-after": "1" });
      else sendJson(res, 200, ok([]));
    });
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      const t0 = Date.now();
      assert.deepEqual(await client.resolve("c", "cue"), []);
      const waited = Date.now() - t0;
      assert.ok(waited >= 950, `waited only ${waited}ms`);
      assert.equal(srv.requests.length, 2);
    } finally {
      await srv.close();
    }
  });

  test("retries are bounded: after retries+1 attempts the last error is thrown with retry_after", async () => {
    const srv = await fakeServer((_req, res) =>
      sendJson(res, 503, { status: "error", code: "overloaded", error: "still busy", time: 0 }, { "retry-after": "0" }),
    );
    try {
      const client = new Taguru({ base_url: srv.url, retries: 3, ...FAST });
      await assert.rejects(client.searchPassages("c", "q"), {
        name: "TaguruError",
        status: 503,
        code: "overloaded",
        message: "still busy",
        retry_after: 0,
      });
      assert.equal(srv.requests.length, 4);
    } finally {
      await srv.close();
    }
  });

  test("500 is retried on safe calls only; addAssociations is not repeated", async () => {
    const srv = await fakeServer((req, res) => {
      if (req.url.endsWith("/associations")) {
        sendJson(res, 500, { status: "error", code: "internal", error: "boom", time: 0 });
      } else if (srv.requests.filter((r) => r.url.endsWith("/query")).length === 1) {
        sendJson(res, 500, { status: "error", code: "internal", error: "boom", time: 0 });
      } else {
        sendJson(res, 200, ok({ total: 0, matches: [] }));
      }
    });
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      await assert.rejects(client.addAssociations("c", [{ subject: "a", label: "b", object: "c", weight: 1 }]), {
        status: 500,
        code: "internal",
      });
      assert.equal(srv.requests.filter((r) => r.url.endsWith("/associations")).length, 1);
      assert.deepEqual(await client.query("c", { subject: "a" }), { total: 0, matches: [] });
      assert.equal(srv.requests.filter((r) => r.url.endsWith("/query")).length, 2);
    } finally {
      await srv.close();
    }
  });

  test("4xx errors are never retried", async () => {
    const srv = await fakeServer((_req, res) =>
      sendJson(res, 404, { status: "error", code: "no_context", error: "context 'c' not found", time: 0 }),
    );
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      await assert.rejects(client.getContext("c"), { status: 404, code: "no_context" });
      assert.equal(srv.requests.length, 1);
    } finally {
      await srv.close();
    }
  });

  test("a refused connection is retried, then surfaces as TransportError", async () => {
    const port = await freePort(); // nothing listens there
    const client = new Taguru({ base_url: `http://127.0.0.1:${port}`, retries: 2, ...FAST });
    await assert.rejects(client.listContexts(), (e: unknown) => {
      assert.ok(e instanceof TransportError);
      assert.ok(e instanceof TaguruError);
      assert.equal(e.status, null);
      assert.equal(e.connect_failed, true);
      return true;
    });
  });

  test("the per-attempt timeout surfaces as TransportError(timed_out)", async () => {
    const srv = await fakeServer(() => {
      /* never answer */
    });
    try {
      const client = new Taguru({ base_url: srv.url, retries: 0, timeout: 0.2 });
      await assert.rejects(client.listContexts(), (e: unknown) => {
        assert.ok(e instanceof TransportError);
        assert.equal(e.timed_out, true);
        return true;
      });
    } finally {
      await srv.close();
    }
  });
});

describe("wire details", () => {
  test("bearer token, JSON body, percent-encoded name, dropped undefined, wrapped origins/labels", async () => {
    const srv = await fakeServer((_req, res) => sendJson(res, 200, ok(evidenceWith("passage", "passage_bm25"))));
    try {
      const client = new Taguru({ base_url: srv.url + "/", api_key: "tok-1", headers: { "x-extra": "1" }, ...FAST });
      await client.assembleEvidence("a::b/c 酒", {
        origins: "青嶺酒造",
        labels: "杜氏",
        budget: { max_items: 2 },
        search_limit: undefined,
        text_fallback_query: null as unknown as undefined,
      });
      const req = srv.requests[0]!;
      assert.equal(req.method, "POST");
      assert.equal(req.url, "/contexts/a%3A%3Ab%2Fc%20%E9%85%92/evidence");
      assert.equal(req.headers["authorization"], "Bearer tok-1");
      assert.equal(req.headers["content-type"], "application/json");
      assert.equal(req.headers["x-extra"], "1");
      assert.equal(req.body, '{"origins":["青嶺酒造"],"labels":["杜氏"],"budget":{"max_items":2}}');
    } finally {
      await srv.close();
    }
  });

  test("GET query parameters: undefined dropped, booleans as true/false", async () => {
    const srv = await fakeServer((_req, res) => sendJson(res, 200, ok({ total: 0, contexts: [] })));
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      await client.listContexts({ limit: 5, pinned: false });
      await client.listContexts({ after: "a b" });
      assert.deepEqual(
        srv.requests.map((r) => r.url),
        ["/contexts?limit=5&pinned=false", "/contexts?after=a+b"],
      );
      assert.equal(srv.requests[0]!.headers["authorization"], undefined);
    } finally {
      await srv.close();
    }
  });

  test("encodeContextName keeps only A-Za-z0-9-._~", () => {
    assert.equal(encodeContextName("a::b/c 酒"), "a%3A%3Ab%2Fc%20%E9%85%92");
    assert.equal(encodeContextName("Az09-._~"), "Az09-._~");
    assert.equal(encodeContextName("!'()*"), "%21%27%28%29%2A");
  });

  test("parseRetryAfter", () => {
    assert.equal(parseRetryAfter("3"), 3);
    assert.equal(parseRetryAfter(null), null);
    assert.equal(parseRetryAfter("soon"), null);
    assert.equal(parseRetryAfter("-1"), null);
    const d = parseRetryAfter(new Date(Date.now() + 5000).toUTCString())!;
    assert.ok(d > 3 && d <= 5);
  });

  test("serializeImport writes header, passage, markers, associations, aliases", () => {
    const text = serializeImport([
      {
        context: "c",
        source: "s",
        create: { description: "d" },
        passage: { text: "p", tags: ["t"] },
        sections: [{ paragraph: 0, section: "S" }],
        associations: [{ subject: "a", label: "b", object: "c", weight: 1 }],
        aliases: [{ alias: "A", canonical: "a", kind: "concept" }],
      },
    ]);
    assert.equal(
      text,
      [
        '{"taguru_batch":1,"context":"c","source":"s","create":{"description":"d"}}',
        '{"passage":"p","tags":["t"]}',
        '{"paragraph":0,"section":"S"}',
        '{"subject":"a","label":"b","object":"c","weight":1}',
        '{"alias":"A","canonical":"a","kind":"concept"}',
      ].join("\n") + "\n",
    );
  });

  test("addAssociations splits batches over 10,000 items and sums the counts", async () => {
    const srv = await fakeServer((req, res) => sendJson(res, 200, ok((JSON.parse(req.body) as unknown[]).length)));
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      const ops = Array.from({ length: 10_001 }, (_, i) => ({ subject: `s${i}`, label: "l", object: "o", weight: 1 }));
      assert.equal(await client.addAssociations("c", ops), 10_001);
      assert.equal(srv.requests.length, 2);
    } finally {
      await srv.close();
    }
  });
});

describe("envelope decoding", () => {
  test("a 2xx body that is not the envelope raises ResponseShapeError", async () => {
    const bodies = ['{"result":1}', '{"status":"ok"}', "not json", "[1]"];
    let i = 0;
    const srv = await fakeServer((_req, res) => res.writeHead(200, { "content-type": "application/json" }).end(bodies[i++]));
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      for (const expected of [
        "response is not the taguru envelope shape",
        "response is not the taguru envelope shape",
        "expected a JSON envelope, got a non-JSON body",
        "response is not the taguru envelope shape",
      ]) {
        await assert.rejects(client.describe("c", "x"), (e: unknown) => {
          assert.ok(e instanceof ResponseShapeError);
          assert.equal(e.message, expected);
          return true;
        });
      }
    } finally {
      await srv.close();
    }
  });

  test("a plain-text error body still maps by status", async () => {
    const srv = await fakeServer((_req, res) => res.writeHead(502, { "content-type": "text/plain" }).end("bad gateway\n"));
    try {
      const client = new Taguru({ base_url: srv.url, retries: 0 });
      await assert.rejects(client.describe("c", "x"), { status: 502, code: null, message: "bad gateway" });
    } finally {
      await srv.close();
    }
  });
});

describe("version probe", () => {
  test("a disjoint http_contract list refuses (sticky); the probe runs once", async () => {
    const srv = await fakeServer(
      (req, res) => {
        if (req.url === "/version") sendJson(res, 200, { server: "9.9.9", http_contract: { current: 2, supported: [2, 3] } });
        else sendJson(res, 200, ok(true));
      },
      { answerVersion: true },
    );
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      for (let i = 0; i < 2; i++) {
        await assert.rejects(client.createContext("x"), (e: unknown) => {
          assert.ok(e instanceof IncompatibleServerError);
          assert.equal(e.server, "9.9.9");
          assert.deepEqual(e.supported, [2, 3]);
          return true;
        });
      }
      assert.deepEqual(
        srv.requests.map((r) => r.url),
        ["/version"],
      );
    } finally {
      await srv.close();
    }
  });

  test("the probe is fail-open and runs once per client", async () => {
    const srv = await fakeServer(
      (req, res) => {
        if (req.url === "/version") sendJson(res, 200, { server: "x", http_contract: { current: 1, supported: [] } });
        else sendJson(res, 200, ok(true));
      },
      { answerVersion: true },
    );
    try {
      const client = new Taguru({ base_url: srv.url, ...FAST });
      await client.createContext("a");
      await client.createContext("b");
      assert.deepEqual(
        srv.requests.map((r) => `${r.method} ${r.url}`),
        ["GET /version", "PUT /contexts/a", "PUT /contexts/b"],
      );
      assert.equal(srv.requests[1]!.body, '{"description":"","pinned":false}');
    } finally {
      await srv.close();
    }
  });
});
