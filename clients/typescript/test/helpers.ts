import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, existsSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** clients/typescript (this file runs from clients/typescript/dist/test/). */
export const PACKAGE_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** The project root holding server/ and .venv/. */
export const REPO_ROOT = resolve(PACKAGE_ROOT, "..", "..");

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createNetServer();
    srv.unref();
    srv.on("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address() as AddressInfo;
      srv.close(() => res(port));
    });
  });
}

export interface LiveServer {
  url: string;
  stop(): Promise<void>;
}

/**
 * Spawn the Python server (`python -m server.cli serve`) on a free port with a fresh
 * data dir, wait for `GET /live`, and return a handle whose `stop()` SIGTERMs it.
 */
export async function startServer(extraEnv: Record<string, string> = {}): Promise<LiveServer> {
  const python = process.env.TAGURU_TEST_PYTHON || join(REPO_ROOT, ".venv", "bin", "python");
  if (!existsSync(python)) throw new Error(`no Python interpreter at ${python} (run scripts/test.sh or set TAGURU_TEST_PYTHON)`);
  const dataDir = mkdtempSync(join(tmpdir(), "taguru-ts-"));
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined || k.startsWith("TAGURU_") || k.startsWith("OTEL_")) continue;
    env[k] = v;
  }
  let lastErr = "";
  for (let tryNo = 0; tryNo < 3; tryNo++) {
    const port = await freePort();
    const child: ChildProcess = spawn(python, ["-m", "taguru_server.cli", "serve"], {
      cwd: REPO_ROOT,
      env: { ...env, TAGURU_ADDR: `127.0.0.1:${port}`, TAGURU_DATA_DIR: dataDir, TAGURU_FLUSH_SECS: "1", ...extraEnv },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr?.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    let exited = false;
    // Never leave the server behind if this test process dies first.
    const reap = () => {
      if (!exited) child.kill("SIGKILL");
    };
    process.once("exit", reap);
    child.on("exit", () => {
      exited = true;
      process.removeListener("exit", reap);
    });
    const url = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 20_000;
    let up = false;
    while (!exited && Date.now() < deadline) {
      try {
        const r = await fetch(url + "/live", { signal: AbortSignal.timeout(1000) });
        if (r.status === 200 && (await r.text()) === "ok") {
          up = true;
          break;
        }
      } catch {
        /* not yet */
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    const stop = async () => {
      if (!exited) {
        const gone = new Promise<void>((r) => child.once("exit", () => r()));
        child.kill("SIGTERM");
        const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
        await gone;
        clearTimeout(timer);
      }
    };
    if (up) {
      return {
        url,
        stop: async () => {
          await stop();
          rmSync(dataDir, { recursive: true, force: true });
        },
      };
    }
    await stop();
    lastErr = stderr;
  }
  rmSync(dataDir, { recursive: true, force: true });
  throw new Error(`the Python server did not come up:\n${lastErr}`);
}

export interface SeenRequest {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

export interface FakeServer {
  url: string;
  requests: SeenRequest[];
  close(): Promise<void>;
}

export type FakeHandler = (req: SeenRequest, res: ServerResponse) => void;

/** A tiny local HTTP server; `handler` answers every request except `GET /version` (answered 404). */
export async function fakeServer(handler: FakeHandler, opts: { answerVersion?: boolean } = {}): Promise<FakeServer> {
  const requests: SeenRequest[] = [];
  const srv = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const seen: SeenRequest = {
        method: req.method ?? "",
        url: req.url ?? "",
        headers: req.headers,
        body: Buffer.concat(chunks).toString("utf8"),
      };
      if (seen.method === "GET" && seen.url === "/version" && !opts.answerVersion) {
        res.writeHead(404, { "content-type": "text/plain" }).end("no");
        return;
      }
      requests.push(seen);
      handler(seen, res);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const { port } = srv.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((r) => {
        srv.closeAllConnections();
        srv.close(() => r());
      }),
  };
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));
}

export function ok(result: unknown): unknown {
  return { result, status: "ok", time: 0.0 };
}
