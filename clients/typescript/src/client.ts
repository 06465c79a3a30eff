import {
  ResponseShapeError,
  IncompatibleServerError,
  TaguruError,
  TransportError,
  errorFromResponse,
} from "./errors.js";
import type {
  ActivateOptions,
  ActivateResult,
  AliasList,
  AliasMap,
  AliasRemoval,
  AssociationInput,
  Citation,
  CommunitySearchResult,
  ContextEntry,
  ContextList,
  CreateContextOptions,
  Description,
  EvidencePackage,
  EvidenceRequest,
  HealthInfo,
  ImportBatch,
  ImportOptions,
  ImportResult,
  ListContextsOptions,
  PassageSearchResult,
  QueryRequest,
  QueryResult,
  RecallOptions,
  ResolveCandidate,
  ResolveOptions,
  SearchCommunitiesOptions,
  SearchPassagesOptions,
  StorePassagesOptions,
  StorePassagesResult,
  SuccessEnvelope,
  VersionInfo,
} from "./models.js";

/** The HTTP contract versions this client speaks. */
export const SUPPORTED_HTTP_CONTRACTS: readonly number[] = [1];
export const DEFAULT_BASE_URL = "http://127.0.0.1:8248";

/** Per-request caps the server enforces on `POST …/associations`; `addAssociations` splits below them. */
const MAX_ASSOCIATIONS_PER_REQUEST = 10_000;
const MAX_BODY_BYTES = 8 * 1024 * 1024;

type FetchLike = (input: string, init: RequestInit) => Promise<Response>;

export interface TaguruOptions {
  /** Server URL. Empty/absent falls through to `$TAGURU_URL`, then `http://127.0.0.1:8248`. */
  base_url?: string;
  /** Bearer token. Empty/absent falls through to `$TAGURU_API_TOKEN`; when set, sent on every request. */
  api_key?: string;
  /** Per-attempt timeout in **seconds** (default 30; 0 disables). */
  timeout?: number;
  /** Extra attempts after the first on retryable failures (default 2, so 3 attempts at most). */
  retries?: number;
  /** Extra headers sent on every request. */
  headers?: Record<string, string>;
  /** A `fetch` implementation (default: the global `fetch`). */
  fetch?: FetchLike;
  /** Backoff base in seconds: attempt n waits uniform(0, min(backoff_max, backoff_base·2^n)) (default 0.5). */
  backoff_base?: number;
  /** Upper bound of one backoff wait in seconds (default 8). */
  backoff_max?: number;
  /** Upper bound in seconds on an honoured `Retry-After` (default 60). */
  max_retry_after?: number;
  /** Check `GET /version` once before the first request (default true; fail-open). */
  check_version?: boolean;
}

export interface RequestOptions {
  /** JSON body (serialized compactly) or a raw string body. */
  body?: unknown;
  /** Content type of a raw string body (JSON bodies always use application/json). */
  content_type?: string;
  /** Query parameters; `undefined`/`null` are dropped, booleans sent as `true`/`false`. */
  query?: Record<string, string | number | boolean | null | undefined>;
  /**
   * Whether the call is safe to repeat: safe calls also retry on 500/502/504 and on transport
   * errors after the request may have been sent. 429 and 503 (which mean "not executed") and
   * connection failures retry on every call. Default true.
   */
  safe?: boolean;
  /** Disable retries for this call. */
  no_retry?: boolean;
}

function env(name: string): string | undefined {
  const proc = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return proc?.env?.[name];
}

/**
 * Percent-encode a context name as one path segment, keeping only `A-Za-z0-9-._~`
 * (`a::b/c 酒` → `a%3A%3Ab%2Fc%20%E9%85%92`).
 */
export function encodeContextName(name: string): string {
  return encodeURIComponent(name).replace(
    /[!'()*]/g,
    (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase().padStart(2, "0"),
  );
}

/** `Retry-After` as seconds (delta-seconds or an HTTP date); null when absent or unusable. */
export function parseRetryAfter(value: string | null): number | null {
  if (value === null) return null;
  const v = value.trim();
  if (v === "") return null;
  if (/^\d+(\.\d+)?$/.test(v)) {
    const n = Number(v);
    return Number.isFinite(n) && n >= 0 ? n : null;
  }
  if (!/[A-Za-z]/.test(v)) return null; // not delta-seconds and not an HTTP date
  const at = Date.parse(v);
  if (Number.isNaN(at)) return null;
  return Math.max(0, (at - Date.now()) / 1000);
}

function compact<T extends object>(obj: T): Partial<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v !== undefined && v !== null) out[k] = v;
  }
  return out as Partial<T>;
}

function asList(v: string | string[]): string[];
function asList(v: string | string[] | undefined): string[] | undefined;
function asList(v: string | string[] | undefined): string[] | undefined {
  if (v === undefined || v === null) return undefined;
  return typeof v === "string" ? [v] : v;
}

const CONNECT_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EADDRNOTAVAIL",
  "UND_ERR_CONNECT_TIMEOUT",
]);

function errorCode(err: unknown): string | undefined {
  let e: unknown = err;
  for (let depth = 0; depth < 4 && e !== null && typeof e === "object"; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string") return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

function toTransportError(err: unknown, method: string, url: string, timeoutSecs: number): TransportError {
  if (err instanceof TaguruError) {
    return err instanceof TransportError ? err : new TransportError(err.message, { cause: err });
  }
  const name = (err as { name?: unknown } | null)?.name;
  if (name === "TimeoutError") {
    return new TransportError(`${method} ${url} timed out after ${timeoutSecs}s`, { cause: err, timed_out: true });
  }
  const code = errorCode(err);
  const detail = code ?? (err instanceof Error ? err.message : String(err));
  return new TransportError(`${method} ${url} failed: ${detail}`, {
    cause: err,
    connect_failed: code !== undefined && CONNECT_ERROR_CODES.has(code),
  });
}

function sleep(seconds: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, Math.max(0, seconds * 1000)));
}

/**
 * Client of the Taguru HTTP service. Methods mirror the wire routes; request and
 * result fields keep their snake_case wire names. Results are cast, not validated.
 */
export class Taguru {
  readonly base_url: string;
  readonly retries: number;
  readonly timeout: number;
  private readonly apiKey: string | undefined;
  private readonly headers: Record<string, string>;
  private readonly fetchImpl: FetchLike;
  private readonly backoffBase: number;
  private readonly backoffMax: number;
  private readonly maxRetryAfter: number;
  private probeState: "pending" | "done" = "pending";
  private probeInFlight: Promise<void> | null = null;
  private incompatible: IncompatibleServerError | null = null;

  constructor(options: TaguruOptions = {}) {
    const url = options.base_url || env("TAGURU_URL") || DEFAULT_BASE_URL;
    this.base_url = url.replace(/\/+$/, "");
    const key = options.api_key || env("TAGURU_API_TOKEN");
    this.apiKey = key ? key : undefined;
    this.timeout = options.timeout ?? 30;
    this.retries = Math.max(0, Math.floor(options.retries ?? 2));
    this.headers = { ...(options.headers ?? {}) };
    const f = options.fetch ?? (globalThis.fetch as FetchLike | undefined);
    if (typeof f !== "function") throw new TaguruError("no fetch implementation: pass options.fetch (Node >= 20 has one)");
    this.fetchImpl = f;
    this.backoffBase = options.backoff_base ?? 0.5;
    this.backoffMax = options.backoff_max ?? 8;
    this.maxRetryAfter = options.max_retry_after ?? 60;
    if (options.check_version === false) this.probeState = "done";
  }

  // -------------------------------------------------------------------------
  // Transport
  // -------------------------------------------------------------------------

  private buildHeaders(extra: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { accept: "application/json", ...this.headers, ...extra };
    if (this.apiKey) h["authorization"] = `Bearer ${this.apiKey}`;
    return h;
  }

  private buildUrl(path: string, query?: RequestOptions["query"]): string {
    let url = this.base_url + path;
    if (query) {
      const params = new URLSearchParams();
      for (const [k, v] of Object.entries(query)) {
        if (v === undefined || v === null) continue;
        params.append(k, typeof v === "boolean" ? (v ? "true" : "false") : String(v));
      }
      const qs = params.toString();
      if (qs) url += "?" + qs;
    }
    return url;
  }

  /** One attempt; resolves with status, headers and the body text. */
  private async attempt(
    method: string,
    url: string,
    body: string | undefined,
    headers: Record<string, string>,
  ): Promise<{ status: number; headers: Headers; text: string }> {
    const init: RequestInit = { method, headers };
    if (body !== undefined) init.body = body;
    if (this.timeout > 0) init.signal = AbortSignal.timeout(Math.round(this.timeout * 1000));
    try {
      const res = await this.fetchImpl(url, init);
      const text = await res.text();
      return { status: res.status, headers: res.headers, text };
    } catch (err) {
      throw toTransportError(err, method, url, this.timeout);
    }
  }

  /** Once per client: GET /version, no retries, fail-open (only a disjoint contract list refuses). */
  private async ensureCompatible(): Promise<void> {
    if (this.incompatible) throw this.incompatible;
    if (this.probeState === "done") return;
    if (!this.probeInFlight) {
      this.probeInFlight = (async () => {
        let res: { status: number; text: string };
        try {
          res = await this.attempt("GET", this.buildUrl("/version"), undefined, this.buildHeaders({}));
        } catch {
          return; // transport error: check again on the next call
        }
        this.probeState = "done";
        if (res.status < 200 || res.status >= 300) return;
        let doc: unknown;
        try {
          doc = JSON.parse(res.text);
        } catch {
          return;
        }
        const d = doc as { server?: unknown; http_contract?: { supported?: unknown } } | null;
        const supported = d?.http_contract?.supported;
        if (!Array.isArray(supported) || supported.length === 0) return;
        if (!supported.every((v) => typeof v === "number")) return;
        if (supported.some((v) => SUPPORTED_HTTP_CONTRACTS.includes(v as number))) return;
        const server = typeof d?.server === "string" ? d.server : null;
        this.incompatible = new IncompatibleServerError(
          `server ${server ?? "(unknown)"} speaks http_contract ${JSON.stringify(supported)}; ` +
            `this client speaks ${JSON.stringify(SUPPORTED_HTTP_CONTRACTS)}`,
          server,
          supported as number[],
        );
      })().finally(() => {
        this.probeInFlight = null;
      });
    }
    await this.probeInFlight;
    if (this.incompatible) throw this.incompatible;
  }

  private backoffDelay(attempt: number, retryAfter: number | null): number {
    if (retryAfter !== null && Number.isFinite(retryAfter) && retryAfter >= 0) {
      return Math.min(retryAfter, this.maxRetryAfter);
    }
    return Math.random() * Math.min(this.backoffMax, this.backoffBase * 2 ** attempt);
  }

  private static retryableStatus(status: number, safe: boolean): boolean {
    if (status === 429 || status === 503) return true; // "not executed" by contract
    return safe && (status === 500 || status === 502 || status === 504);
  }

  /** Send with retries; resolve with the status and body text of a 2xx response, else throw. */
  private async send(
    method: string,
    path: string,
    opts: RequestOptions = {},
  ): Promise<{ status: number; headers: Headers; text: string }> {
    await this.ensureCompatible();
    const safe = opts.safe ?? true;
    const maxAttempts = opts.no_retry ? 1 : this.retries + 1;
    const url = this.buildUrl(path, opts.query);
    let body: string | undefined;
    const extra: Record<string, string> = {};
    if (opts.body !== undefined) {
      if (typeof opts.body === "string" && opts.content_type !== undefined) {
        body = opts.body;
        extra["content-type"] = opts.content_type;
      } else {
        body = JSON.stringify(opts.body);
        extra["content-type"] = "application/json";
      }
    }
    const headers = this.buildHeaders(extra);
    for (let attempt = 0; ; attempt++) {
      const last = attempt + 1 >= maxAttempts;
      let res: { status: number; headers: Headers; text: string };
      try {
        res = await this.attempt(method, url, body, headers);
      } catch (err) {
        const te = err as TransportError;
        if (last || !(te.connect_failed || safe)) throw te;
        await sleep(this.backoffDelay(attempt, null));
        continue;
      }
      if (res.status >= 200 && res.status < 300) return res;
      const retryAfter = parseRetryAfter(res.headers.get("retry-after"));
      if (!last && Taguru.retryableStatus(res.status, safe)) {
        await sleep(this.backoffDelay(attempt, retryAfter));
        continue;
      }
      throw errorFromResponse(res.status, res.text, retryAfter);
    }
  }

  /**
   * Low-level call: sends the request (with auth, retries and the version probe) and
   * returns the decoded success envelope. Throws `TaguruError` on an error status
   * and `ResponseShapeError` when a 2xx body is not the `{result, status:"ok"}` envelope.
   */
  async request<T = unknown>(method: string, path: string, opts: RequestOptions = {}): Promise<SuccessEnvelope<T>> {
    const res = await this.send(method, path, opts);
    let doc: unknown;
    try {
      doc = JSON.parse(res.text);
    } catch (err) {
      throw new ResponseShapeError("expected a JSON envelope, got a non-JSON body", {
        status: res.status,
        body: res.text,
        cause: err,
      });
    }
    if (doc === null || typeof doc !== "object" || Array.isArray(doc)) {
      throw new ResponseShapeError("response is not the taguru envelope shape", { status: res.status, body: doc });
    }
    const env = doc as Record<string, unknown>;
    if (env.status !== "ok" || !("result" in env)) {
      throw new ResponseShapeError("response is not the taguru envelope shape", { status: res.status, body: doc });
    }
    return doc as SuccessEnvelope<T>;
  }

  private async result<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    return (await this.request<T>(method, path, opts)).result;
  }

  private ctx(name: string, suffix = ""): string {
    return `/contexts/${encodeContextName(name)}${suffix}`;
  }

  // -------------------------------------------------------------------------
  // Probes (bare responses, no retries)
  // -------------------------------------------------------------------------

  /** `GET /version` (bare JSON). */
  async version(): Promise<VersionInfo> {
    const res = await this.send("GET", "/version", { no_retry: true });
    return JSON.parse(res.text) as VersionInfo;
  }

  /** `GET /health` (bare JSON); a 503 `unhealthy`/`maintenance` throws `TaguruError`. */
  async health(): Promise<HealthInfo> {
    const res = await this.send("GET", "/health", { no_retry: true });
    return JSON.parse(res.text) as HealthInfo;
  }

  /** `GET /live`: the plain-text body (`ok`). */
  async live(): Promise<string> {
    return (await this.send("GET", "/live", { no_retry: true })).text;
  }

  // -------------------------------------------------------------------------
  // Contexts
  // -------------------------------------------------------------------------

  /** `PUT /contexts/{name}` → `true`. A duplicate is 409 `already_exists`. Not retried on 5xx. */
  async createContext(name: string, options: CreateContextOptions = {}): Promise<boolean> {
    const body = compact({
      description: options.description ?? "",
      pinned: options.pinned ?? false,
      dice_floor: options.dice_floor,
      semantic_floor: options.semantic_floor,
    });
    return Boolean(await this.result<unknown>("PUT", this.ctx(name), { body, safe: false }));
  }

  /** `GET /contexts/{name}`; 404 `no_context` when missing. */
  async getContext(name: string): Promise<ContextEntry> {
    return this.result<ContextEntry>("GET", this.ctx(name));
  }

  /** `GET /contexts?limit&after&pinned`. */
  async listContexts(options: ListContextsOptions = {}): Promise<ContextList> {
    return this.result<ContextList>("GET", "/contexts", {
      query: { limit: options.limit, after: options.after, pinned: options.pinned },
    });
  }

  /** `DELETE /contexts/{name}` (admin) → `true`. Not retried on 5xx. */
  async deleteContext(name: string): Promise<boolean> {
    return Boolean(await this.result<unknown>("DELETE", this.ctx(name), { safe: false }));
  }

  // -------------------------------------------------------------------------
  // Ingest
  // -------------------------------------------------------------------------

  /**
   * `POST /contexts/{name}/associations` → the number applied. Split into requests of at
   * most 10,000 items / 8 MiB. Associations accumulate, so this is not retried on 5xx
   * (only on 429/503, which mean "not executed").
   */
  async addAssociations(name: string, associations: AssociationInput[]): Promise<number> {
    const enc = new TextEncoder();
    const chunks: string[][] = [];
    let cur: string[] = [];
    let curBytes = 2;
    for (const a of associations) {
      const s = JSON.stringify(compact(a));
      const n = enc.encode(s).length + 1;
      if (cur.length > 0 && (cur.length >= MAX_ASSOCIATIONS_PER_REQUEST || curBytes + n > MAX_BODY_BYTES)) {
        chunks.push(cur);
        cur = [];
        curBytes = 2;
      }
      cur.push(s);
      curBytes += n;
    }
    if (cur.length > 0 || chunks.length === 0) chunks.push(cur);
    let applied = 0;
    for (const chunk of chunks) {
      const r = await this.result<unknown>("POST", this.ctx(name, "/associations"), {
        body: "[" + chunk.join(",") + "]",
        content_type: "application/json",
        safe: false,
      });
      applied += Number(r);
    }
    return applied;
  }

  /** `POST /contexts/{name}/sources`: store passages (each listed source is replaced wholesale). */
  async storePassages(
    name: string,
    passages: Record<string, string>,
    options: StorePassagesOptions = {},
  ): Promise<StorePassagesResult> {
    const body = compact({ passages, ...options });
    return this.result<StorePassagesResult>("POST", this.ctx(name, "/sources"), { body });
  }

  /** `POST /contexts/{name}/aliases` → the number applied (no-ops included). */
  async addAliases(name: string, aliases: AliasMap): Promise<number> {
    const body = { concepts: aliases.concepts ?? {}, labels: aliases.labels ?? {} };
    return Number(await this.result<unknown>("POST", this.ctx(name, "/aliases"), { body }));
  }

  /** `DELETE /contexts/{name}/aliases` → the number removed. */
  async removeAliases(name: string, aliases: AliasRemoval): Promise<number> {
    const body = { concepts: aliases.concepts ?? [], labels: aliases.labels ?? [] };
    return Number(await this.result<unknown>("DELETE", this.ctx(name, "/aliases"), { body }));
  }

  /** `GET /contexts/{name}/aliases?limit&after&prefix`. */
  async getAliases(name: string, options: { limit?: number; after?: string; prefix?: string } = {}): Promise<AliasList> {
    return this.result<AliasList>("GET", this.ctx(name, "/aliases"), { query: { ...options } });
  }

  /**
   * `POST /import` (admin): a JSONL stream, given raw or as structured batches (one source's
   * complete truth each). Re-importing a batch is idempotent, so this call is retried.
   * A refusal mid-stream throws with `integrity: "durable_prefix"` and `durable_batches`.
   */
  async importBatches(batches: string | ImportBatch[], options: ImportOptions = {}): Promise<ImportResult> {
    const body = typeof batches === "string" ? batches : serializeImport(batches);
    return this.result<ImportResult>("POST", "/import", {
      body,
      content_type: "application/x-ndjson",
      query: { dry_run: options.dry_run ? true : undefined },
    });
  }

  // -------------------------------------------------------------------------
  // Read lanes
  // -------------------------------------------------------------------------

  /** `POST /contexts/{name}/resolve` → candidate concepts (a bare array). */
  async resolve(name: string, cue: string, options: ResolveOptions = {}): Promise<ResolveCandidate[]> {
    return this.result<ResolveCandidate[]>("POST", this.ctx(name, "/resolve"), { body: compact({ cue, ...options }) });
  }

  /** `POST /contexts/{name}/query`: each position is a string or an OR-list. */
  async query(name: string, request: QueryRequest): Promise<QueryResult> {
    return this.result<QueryResult>("POST", this.ctx(name, "/query"), { body: compact({ ...request }) });
  }

  /** `POST /contexts/{name}/recall`: every edge whose subject, label or object is `cue`. */
  async recall(name: string, cue: string, options: RecallOptions = {}): Promise<QueryResult> {
    return this.result<QueryResult>("POST", this.ctx(name, "/recall"), { body: compact({ cue, ...options }) });
  }

  /** `POST /contexts/{name}/activate`: spreading activation from `origins` (a string is wrapped). */
  async activate(name: string, origins: string | string[], options: ActivateOptions = {}): Promise<ActivateResult> {
    return this.result<ActivateResult>("POST", this.ctx(name, "/activate"), {
      body: compact({ origins: asList(origins), ...options }),
    });
  }

  /** `POST /contexts/{name}/describe` → label counts, or `null` for an unknown concept. */
  async describe(name: string, concept: string): Promise<Description | null> {
    return this.result<Description | null>("POST", this.ctx(name, "/describe"), { body: { concept } });
  }

  /** `POST /contexts/{name}/sources/search`: BM25 (and vector, when configured) passage search. */
  async searchPassages(name: string, query: string, options: SearchPassagesOptions = {}): Promise<PassageSearchResult> {
    return this.result<PassageSearchResult>("POST", this.ctx(name, "/sources/search"), {
      body: compact({ query, ...options }),
    });
  }

  /** `POST /contexts/{name}/citations`: one paragraph; 404 `no_source` / `no_paragraph`. */
  async cite(name: string, source: string, paragraph: number): Promise<Citation> {
    return this.result<Citation>("POST", this.ctx(name, "/citations"), { body: { source, paragraph } });
  }

  /** `POST /contexts/{name}/communities/search` over the `{name}::communities` artifact (or `derived`). */
  async searchCommunities(
    name: string,
    query: string,
    options: SearchCommunitiesOptions = {},
  ): Promise<CommunitySearchResult> {
    return this.result<CommunitySearchResult>("POST", this.ctx(name, "/communities/search"), {
      body: compact({ query, ...options }),
    });
  }

  /**
   * `POST /contexts/{name}/evidence`: a budgeted, cited evidence package. `origins` and
   * `labels` may be bare strings; `undefined`/`null` fields are not sent.
   */
  async assembleEvidence(name: string, request: EvidenceRequest | string | string[]): Promise<EvidencePackage> {
    const req: EvidenceRequest =
      typeof request === "string" || Array.isArray(request) ? { origins: request } : request;
    const body = compact({ ...req, origins: asList(req.origins), labels: asList(req.labels) });
    return this.result<EvidencePackage>("POST", this.ctx(name, "/evidence"), { body });
  }
}

/** Serialize structured import batches into the JSONL stream format (header line first). */
export function serializeImport(batches: ImportBatch[]): string {
  const lines: string[] = [];
  for (const b of batches) {
    lines.push(
      JSON.stringify(compact({ taguru_batch: 1, context: b.context, source: b.source, create: b.create })),
    );
    if (b.passage) {
      const { text, ...meta } = b.passage;
      lines.push(JSON.stringify(compact({ passage: text, ...meta })));
    }
    for (const q of b.questions ?? []) lines.push(JSON.stringify({ paragraph: q.paragraph, question: q.question }));
    for (const s of b.sections ?? []) lines.push(JSON.stringify({ paragraph: s.paragraph, section: s.section }));
    for (const l of b.locators ?? []) lines.push(JSON.stringify({ paragraph: l.paragraph, locator: l.locator }));
    for (const a of b.associations ?? []) lines.push(JSON.stringify(compact({ ...a })));
    for (const a of b.aliases ?? []) lines.push(JSON.stringify({ alias: a.alias, canonical: a.canonical, kind: a.kind }));
  }
  return lines.join("\n") + (lines.length > 0 ? "\n" : "");
}
