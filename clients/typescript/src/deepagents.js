// SandgateSandbox: a deepagents sandbox backend whose every operation goes
// through a sandgate gateway (risk assessment, policy, approval, audit).
//
// It subclasses deepagents' BaseSandbox and implements the three methods
// BaseSandbox leaves abstract: execute, uploadFiles and downloadFiles.
// BaseSandbox builds ls, read, readRaw, grep, glob, write, edit and delete
// on those, so their results are exactly deepagents' own, and each of them
// is a request the gateway assesses and records: a shell command the policy
// refuses stays refused whichever tool sent it.
import { BaseSandbox } from "deepagents";

import { SandgateClient, SandgateError } from "./index.js";

// fileErrors maps the gateway's stable codes to deepagents'
// FileOperationError values; any other failure is not a per-file error and
// is thrown (a bad token or an outage must not look like a missing file).
const fileErrors = {
  not_found: "file_not_found",
  path_traversal: "invalid_path",
  invalid_request: "invalid_path",
  forbidden: "permission_denied",
  policy_denied: "permission_denied",
  file_too_large: "permission_denied",
  quota_exceeded: "permission_denied",
};

// refusals are the answers that say the gateway would not run a command:
// execute reports them as output (exit code REFUSED_EXIT) so that the
// agent's model reads why and can change course, rather than the whole
// agent run failing on a thrown error.
const refusals = new Set(["policy_denied", "approval_denied", "approval_timeout", "approval_unavailable"]);

/** The exit code execute reports for a command the gateway refused. */
export const REFUSED_EXIT = 126;

export class SandgateSandbox extends BaseSandbox {
  /**
   * @param {object} opts
   * @param {string} [opts.baseUrl] the gateway's URL (or pass opts.client)
   * @param {string} [opts.token] an agent token
   * @param {string} opts.sessionId the session: this sandbox's id and workspace
   * @param {number} [opts.timeoutS] each command's timeout (the policy caps it)
   * @param {boolean} [opts.stream] stream execute's output (NDJSON)
   * @param {(ev: object) => void} [opts.onEvent] every streamed event; implies stream
   * @param {SandgateClient} [opts.client] an existing client
   */
  constructor({ baseUrl, token, sessionId, timeoutS, stream = false, onEvent, client } = {}) {
    super();
    if (!sessionId) throw new TypeError("SandgateSandbox: sessionId is required");
    this.client = client ?? new SandgateClient({ baseUrl, token });
    this.session = this.client.session(sessionId);
    this.timeoutS = timeoutS;
    this.stream = stream || Boolean(onEvent);
    this.onEvent = onEvent;
  }

  /** The session id: deepagents' sandbox id. */
  get id() {
    return this.session.id;
  }

  /**
   * execute runs command in the session's workspace (the working directory
   * is /workspace). A refusal is returned as output with exit code
   * REFUSED_EXIT; other failures throw a SandgateError.
   */
  async execute(command, { timeout } = {}) {
    let res;
    try {
      res = await this.session.execute(command, {
        timeoutS: timeout ?? this.timeoutS,
        stream: this.stream,
        onEvent: this.onEvent,
      });
    } catch (err) {
      if (err instanceof SandgateError && refusals.has(err.code)) {
        return { output: `sandgate refused this command (${err.code}): ${err.message}`, exitCode: REFUSED_EXIT, truncated: false };
      }
      throw err;
    }
    return { output: res.output, exitCode: res.exit_code, truncated: res.truncated };
  }

  /** uploadFiles writes each file (parents created); partial success. */
  async uploadFiles(files) {
    const out = [];
    for (const [path, content] of files) {
      try {
        await this.session.writeFile(path, content);
        out.push({ path, error: null });
      } catch (err) {
        out.push({ path, error: fileError(err) });
      }
    }
    return out;
  }

  /** downloadFiles reads each file's bytes; partial success. */
  async downloadFiles(paths) {
    const out = [];
    for (const path of paths) {
      try {
        out.push({ path, content: await this.session.getFile(path), error: null });
      } catch (err) {
        out.push({ path, content: null, error: fileError(err) });
      }
    }
    return out;
  }

  /** close ends the session (and purges its workspace when asked). */
  close({ purge = false } = {}) {
    return this.session.delete({ purge });
  }
}

function fileError(err) {
  const mapped = err instanceof SandgateError ? fileErrors[err.code] : undefined;
  if (mapped) return mapped;
  throw err;
}
