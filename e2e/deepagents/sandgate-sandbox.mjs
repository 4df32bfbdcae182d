// A deepagents sandbox backed by a sandgate gateway, written the way the
// deepagents docs describe a custom sandbox: subclass BaseSandbox and
// implement execute(), uploadFiles() and downloadFiles(); BaseSandbox builds
// ls, read, grep, glob, edit, write and delete on top of them.
//
// It deliberately contains no knowledge of sandgate's internals (no path
// rewriting, no retries, no executor hints): the end-to-end test uses it to
// catch the gateway misbehaving towards an ordinary client.
import { BaseSandbox } from "deepagents";

// fileErrors maps the gateway's stable error codes to the FileOperationError
// values deepagents knows; anything else is not a per-file failure.
const fileErrors = {
  not_found: "file_not_found",
  path_traversal: "invalid_path",
  invalid_request: "invalid_path",
  forbidden: "permission_denied",
  policy_denied: "permission_denied",
};

export class SandgateError extends Error {
  constructor(status, body) {
    const err = body?.error ?? {};
    super(`sandgate: HTTP ${status} ${err.code ?? "?"}: ${err.message ?? ""}`);
    this.status = status;
    this.code = err.code;
  }
}

export class SandgateSandbox extends BaseSandbox {
  constructor({ baseUrl, token, sessionId, timeoutS = 60 }) {
    super();
    this.id = sessionId;
    this.baseUrl = baseUrl.replace(/\/$/, "");
    this.token = token;
    this.timeoutS = timeoutS;
    // Every gateway answer, in order (method, target, status, executor):
    // the test reports which executor served a failing operation.
    this.calls = [];
  }

  url(suffix) {
    return `${this.baseUrl}/v1/sessions/${encodeURIComponent(this.id)}${suffix}`;
  }

  async request(method, suffix, body, headers = {}) {
    return fetch(this.url(suffix), {
      method,
      body,
      headers: { Authorization: `Bearer ${this.token}`, ...headers },
    });
  }

  async execute(command) {
    const res = await this.request(
      "POST",
      "/execute",
      JSON.stringify({ command, timeout_s: this.timeoutS }),
      { "Content-Type": "application/json" },
    );
    const body = await res.json().catch(() => null);
    this.calls.push({ method: "execute", target: command, status: res.status, executor: body?.sandbox_type ?? null });
    if (!res.ok) throw new SandgateError(res.status, body);
    return { output: body.output, exitCode: body.exit_code, truncated: body.truncated };
  }

  async uploadFiles(files) {
    const out = [];
    for (const [path, content] of files) {
      const res = await this.request("PUT", `/files/content?path=${encodeURIComponent(path)}`, content, {
        "Content-Type": "application/octet-stream",
      });
      const body = await res.json().catch(() => null);
      this.calls.push({ method: "upload", target: path, status: res.status, executor: null });
      out.push({ path, error: res.ok ? null : this.fileError(res.status, body) });
    }
    return out;
  }

  async downloadFiles(paths) {
    const out = [];
    for (const path of paths) {
      const res = await this.request("GET", `/files/content?path=${encodeURIComponent(path)}`);
      this.calls.push({ method: "download", target: path, status: res.status, executor: null });
      if (res.ok) {
        out.push({ path, content: new Uint8Array(await res.arrayBuffer()), error: null });
        continue;
      }
      const body = await res.json().catch(() => null);
      out.push({ path, content: null, error: this.fileError(res.status, body) });
    }
    return out;
  }

  // fileError turns a refused file request into a per-file error
  // (deepagents wants partial success); an outage or a bad token is thrown.
  fileError(status, body) {
    const mapped = fileErrors[body?.error?.code];
    if (mapped) return mapped;
    throw new SandgateError(status, body);
  }
}
