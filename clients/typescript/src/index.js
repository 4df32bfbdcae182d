// A thin client for the sandgate HTTP API (DESIGN.md §5) with NDJSON
// streaming of run_code and execute (§10). It has no dependencies: it uses
// the platform's fetch, so it runs on Node >= 20, Deno, Bun and browsers.
//
// The deepagents sandbox lives in "./deepagents.js" (the package's
// "./deepagents" export), so that using the client alone never loads
// deepagents.

/** The media type of a streamed run: one JSON event per line. */
export const NDJSON = "application/x-ndjson";

/**
 * A gateway answer that is not a success: the stable error code and the
 * client-safe message of the gateway's error body.
 */
export class SandgateError extends Error {
  constructor(status, body) {
    const err = body?.error ?? {};
    super(`sandgate: HTTP ${status} ${err.code ?? "unknown"}: ${err.message ?? ""}`.trimEnd());
    this.name = "SandgateError";
    this.status = status;
    this.code = err.code ?? "unknown";
    this.reasons = err.reasons ?? [];
    this.fields = err.fields ?? [];
    this.requestId = err.request_id ?? null;
    this.body = body ?? null;
  }
}

/** The connection to one gateway: a base URL and a bearer token. */
export class SandgateClient {
  constructor({ baseUrl, token, fetch: fetchImpl } = {}) {
    if (!baseUrl) throw new TypeError("SandgateClient: baseUrl is required");
    if (!token) throw new TypeError("SandgateClient: token is required");
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.token = token;
    this.fetch = fetchImpl ?? globalThis.fetch.bind(globalThis);
  }

  /** The handle of one session; sessions are created by their first use. */
  session(id) {
    return new Session(this, id);
  }

  /**
   * request sends one request and returns the Response when its status is
   * 2xx; otherwise it throws a SandgateError with the gateway's error body.
   */
  async request(method, path, { query, body, json, headers = {}, signal } = {}) {
    const url = new URL(this.baseUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined && v !== null) url.searchParams.set(k, String(v));
    }
    const h = { Authorization: `Bearer ${this.token}`, ...headers };
    if (json !== undefined) {
      h["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    }
    const res = await this.fetch(url, { method, body, headers: h, signal });
    if (!res.ok) throw new SandgateError(res.status, await res.json().catch(() => null));
    return res;
  }

  async json(method, path, opts) {
    const res = await this.request(method, path, opts);
    return res.status === 204 ? null : res.json();
  }

  /** GET /v1/approvals (approver token). */
  listApprovals({ status = "pending" } = {}) {
    return this.json("GET", "/v1/approvals", { query: { status } });
  }

  /** POST /v1/approvals/{id}/decision (approver token). */
  decideApproval(id, decision, reason) {
    return this.json("POST", `/v1/approvals/${encodeURIComponent(id)}/decision`, { json: { decision, reason } });
  }

  /** POST /v1/policy/evaluate: risk and decision, nothing runs. */
  evaluate(request) {
    return this.json("POST", "/v1/policy/evaluate", { json: request });
  }
}

/** One session's endpoints: runs, files and the session itself. */
export class Session {
  constructor(client, id) {
    if (!id) throw new TypeError("Session: id is required");
    this.client = client;
    this.id = id;
    this.prefix = `/v1/sessions/${encodeURIComponent(id)}`;
  }

  /**
   * runCode runs code. With opts.onEvent (or opts.stream) the run streams:
   * each event reaches onEvent as it arrives, and the result is the exit
   * event's body, which equals the JSON response.
   */
  runCode({ code, language = "python", timeoutS, context } = {}, opts = {}) {
    return this.run("run_code", { code, language, timeout_s: timeoutS, context }, opts);
  }

  /** execute runs a shell command (deepagents' execute contract). */
  execute(command, { timeoutS, ...opts } = {}) {
    return this.run("execute", { command, timeout_s: timeoutS }, opts);
  }

  async run(endpoint, body, { onEvent, stream = false, signal } = {}) {
    if (!onEvent && !stream) return this.client.json("POST", `${this.prefix}/${endpoint}`, { json: body, signal });
    let result;
    for await (const ev of this.events(endpoint, body, { signal })) {
      onEvent?.(ev);
      if (ev.event === "exit") result = ev.body;
    }
    return result;
  }

  /**
   * events yields the events of a streamed run as they arrive, ending with
   * exit. An error event is thrown as a SandgateError carrying the status
   * and the stable code it would have had unstreamed, and so is a request
   * refused before the stream starts (an ordinary JSON error answer).
   * Breaking out of the loop cancels the run.
   */
  async *events(endpoint, body, { signal } = {}) {
    const res = await this.client.request("POST", `${this.prefix}/${endpoint}`, {
      json: body,
      headers: { Accept: NDJSON },
      signal,
    });
    if (!(res.headers.get("content-type") ?? "").startsWith(NDJSON)) {
      yield { event: "exit", body: await res.json() }; // a gateway that does not stream
      return;
    }
    let sawEnd = false;
    try {
      for await (const ev of ndjson(res.body)) {
        if (ev.event === "error") throw new SandgateError(ev.status, ev.body);
        if (ev.event === "exit") sawEnd = true;
        yield ev;
        if (sawEnd) return;
      }
    } finally {
      if (!sawEnd) await res.body?.cancel().catch(() => {});
    }
    throw new SandgateError(502, { error: { code: "stream_incomplete", message: "the stream ended without an exit event" } });
  }

  /** GET files/content: the raw bytes. */
  async getFile(path, { signal } = {}) {
    const res = await this.client.request("GET", `${this.prefix}/files/content`, { query: { path }, signal });
    return new Uint8Array(await res.arrayBuffer());
  }

  /** PUT files/content: writes raw bytes (mode overwrite, create or append). */
  writeFile(path, data, { mode, signal } = {}) {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    return this.client.json("PUT", `${this.prefix}/files/content`, {
      query: { path, mode },
      body,
      headers: { "Content-Type": "application/octet-stream" },
      signal,
    });
  }

  /** GET files/read: numbered lines from offset (0-based). */
  readFile(path, { offset, limit, signal } = {}) {
    return this.client.json("GET", `${this.prefix}/files/read`, { query: { path, offset, limit }, signal });
  }

  /** POST files/edit: replace old by new (once, or everywhere). */
  editFile(path, oldText, newText, { replaceAll = false, signal } = {}) {
    return this.client.json("POST", `${this.prefix}/files/edit`, {
      json: { path, old: oldText, new: newText, replace_all: replaceAll },
      signal,
    });
  }

  listFiles(path = "", { depth, signal } = {}) {
    return this.client.json("GET", `${this.prefix}/files/list`, { query: { path, depth }, signal });
  }

  glob(pattern, { path, signal } = {}) {
    return this.client.json("GET", `${this.prefix}/files/glob`, { query: { pattern, path }, signal });
  }

  grep(pattern, { path, glob, literal, signal } = {}) {
    return this.client.json("GET", `${this.prefix}/files/grep`, { query: { pattern, path, glob, literal }, signal });
  }

  deleteFile(path, { recursive, signal } = {}) {
    return this.client.json("DELETE", `${this.prefix}/files`, { query: { path, recursive }, signal });
  }

  /** GET /v1/sessions/{id}. */
  info({ signal } = {}) {
    return this.client.json("GET", this.prefix, { signal });
  }

  /** DELETE /v1/sessions/{id}; purge also deletes the workspace. */
  async delete({ purge = false, signal } = {}) {
    await this.client.request("DELETE", this.prefix, { query: purge ? { purge: "true" } : undefined, signal });
  }
}

/**
 * ndjson yields the JSON values of a byte stream of newline-delimited
 * JSON. A line is only parsed once its newline arrived, so a value split
 * across chunks (or a character split across them) is read whole.
 */
export async function* ndjson(body) {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (line) yield JSON.parse(line);
    }
  }
  buf += decoder.decode();
  if (buf.trim()) yield JSON.parse(buf);
}
