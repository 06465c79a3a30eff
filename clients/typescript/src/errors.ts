import type { ErrorCode, Integrity, Issue } from "./models.js";

export interface TaguruErrorInit {
  status?: number | null;
  code?: ErrorCode | null;
  time?: number | null;
  issues?: Issue[];
  issues_total?: number;
  integrity?: Integrity;
  durable_batches?: number;
  retryable_after_correction?: boolean;
  retry_after?: number | null;
  body?: unknown;
  cause?: unknown;
}

/**
 * Every failure of this client. For an HTTP error the fields come from the
 * error envelope `{status:"error", code, error, time, issues?, …}`; `message`
 * is its `error` text. A plain-text (non-envelope) error body still maps: then
 * `code` is null and `message` is the body text (or `HTTP <status>`).
 */
export class TaguruError extends Error {
  /** HTTP status, or null when no response arrived (transport/probe errors). */
  readonly status: number | null;
  /** Wire code (`no_context`, `over_limit`, …); any newer code passes through. */
  readonly code: ErrorCode | null;
  /** Server-side `time` of the error envelope. */
  readonly time: number | null;
  readonly issues: Issue[];
  readonly issues_total: number | undefined;
  readonly integrity: Integrity | undefined;
  readonly durable_batches: number | undefined;
  readonly retryable_after_correction: boolean | undefined;
  /** Seconds from the `Retry-After` header (429 / 503), when present. */
  readonly retry_after: number | null;
  /** The parsed JSON body (or the raw text) of the failed response. */
  readonly body: unknown;

  constructor(message: string, init: TaguruErrorInit = {}) {
    super(message, init.cause === undefined ? undefined : { cause: init.cause });
    this.name = "TaguruError";
    this.status = init.status ?? null;
    this.code = init.code ?? null;
    this.time = init.time ?? null;
    this.issues = init.issues ?? [];
    this.issues_total = init.issues_total;
    this.integrity = init.integrity;
    this.durable_batches = init.durable_batches;
    this.retryable_after_correction = init.retryable_after_correction;
    this.retry_after = init.retry_after ?? null;
    this.body = init.body;
  }
}

/** No HTTP response: connection refused/reset, DNS failure, or the client timeout. */
export class TransportError extends TaguruError {
  /** True when the request was aborted by this client's `timeout`. */
  readonly timed_out: boolean;
  /** True when the connection was never established (the request was not sent). */
  readonly connect_failed: boolean;

  constructor(message: string, init: TaguruErrorInit & { timed_out?: boolean; connect_failed?: boolean } = {}) {
    super(message, init);
    this.name = "TransportError";
    this.timed_out = init.timed_out ?? false;
    this.connect_failed = init.connect_failed ?? false;
  }
}

/** A 2xx response that is not the `{result, status:"ok"}` envelope. */
export class ResponseShapeError extends TaguruError {
  constructor(message: string, init: TaguruErrorInit = {}) {
    super(message, init);
    this.name = "ResponseShapeError";
  }
}

/** The server's `GET /version` lists HTTP contracts none of which this client speaks (sticky). */
export class IncompatibleServerError extends TaguruError {
  readonly server: string | null;
  readonly supported: number[];

  constructor(message: string, server: string | null, supported: number[]) {
    super(message);
    this.name = "IncompatibleServerError";
    this.server = server;
    this.supported = supported;
  }
}

/** Build a TaguruError from a non-2xx response body (already read as text). */
export function errorFromResponse(status: number, text: string, retryAfter: number | null): TaguruError {
  let parsed: unknown = undefined;
  try {
    parsed = text === "" ? undefined : JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) {
    const b = parsed as Record<string, unknown>;
    const message = typeof b.error === "string" ? b.error : `HTTP ${status}`;
    return new TaguruError(message, {
      status,
      code: typeof b.code === "string" ? b.code : null,
      time: typeof b.time === "number" ? b.time : null,
      issues: Array.isArray(b.issues) ? (b.issues as Issue[]) : [],
      issues_total: typeof b.issues_total === "number" ? b.issues_total : undefined,
      integrity: typeof b.integrity === "string" ? b.integrity : undefined,
      durable_batches: typeof b.durable_batches === "number" ? b.durable_batches : undefined,
      retryable_after_correction:
        typeof b.retryable_after_correction === "boolean" ? b.retryable_after_correction : undefined,
      retry_after: retryAfter,
      body: parsed,
    });
  }
  const trimmed = text.trim();
  return new TaguruError(trimmed !== "" ? trimmed : `HTTP ${status}`, {
    status,
    retry_after: retryAfter,
    body: text,
  });
}
