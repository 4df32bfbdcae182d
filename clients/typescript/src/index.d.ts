// Types of the sandgate client (index.js). Hand-written next to the plain
// ESM source; `npm test` checks them with the pinned TypeScript compiler.

export declare const NDJSON: "application/x-ndjson";

/** The error body of every refused request (DESIGN.md §5). */
export interface ErrorBody {
  error: {
    code: string;
    message: string;
    reasons?: Reason[];
    fields?: FieldError[];
    request_id: string;
  };
}

export interface Reason {
  code: string;
  message: string;
}

export interface FieldError {
  field: string;
  code: string;
  message: string;
}

export declare class SandgateError extends Error {
  constructor(status: number, body: ErrorBody | null);
  readonly status: number;
  /** The stable error code, such as policy_denied or not_found. */
  readonly code: string;
  readonly reasons: Reason[];
  readonly fields: FieldError[];
  readonly requestId: string | null;
  readonly body: ErrorBody | null;
}

export type Level = "SAFE" | "LOW" | "MEDIUM" | "HIGH" | "CRITICAL";

export interface RiskAssessment {
  level: Level;
  proven_safe: boolean;
  patterns: { id: string; message: string; line?: number }[];
}

export interface Decision {
  action: "allow" | "require_approval" | "deny";
  executor: string;
  reasons: Reason[];
  obligations: Record<string, unknown>;
  policy_revision: string;
}

export interface ApprovalOutcome {
  id: string;
  status: string;
  decided_by?: string;
  reason?: string;
}

interface RunCommon {
  exit_code: number;
  truncated: boolean;
  timed_out: boolean;
  output_path?: string;
  sandbox_type: string;
  duration_ms: number;
  risk: RiskAssessment;
  decision: Decision;
  approval: ApprovalOutcome | null;
  request_id: string;
}

export interface RunCodeResponse extends RunCommon {
  success: boolean;
  stdout: string;
  stderr: string;
}

export interface ExecuteResponse extends RunCommon {
  /** stdout, then stderr lines prefixed "[stderr] ". */
  output: string;
}

export interface PendingApproval {
  id: string;
  status: "pending";
  risk_level: Level;
  patterns: RiskAssessment["patterns"];
  reasons: Reason[];
  deadline: string;
}

/** One line of a streamed run (DESIGN.md §10). */
export type StreamEvent<R = unknown> =
  | { event: "decision"; risk: RiskAssessment; decision: Decision }
  | { event: "approval_pending"; approval: PendingApproval }
  | { event: "approval_resolved"; approval: ApprovalOutcome }
  | { event: "stdout" | "stderr"; seq: number; data: string }
  | { event: "keepalive" }
  | { event: "exit"; body: R };

export interface RunOptions<R> {
  /** Every event of the streamed run, as it arrives; implies stream. */
  onEvent?: (ev: StreamEvent<R>) => void;
  /** Stream (Accept: application/x-ndjson) even without onEvent. */
  stream?: boolean;
  signal?: AbortSignal;
}

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined | null>;
  body?: BodyInit;
  json?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

export interface ClientOptions {
  baseUrl: string;
  /** A bearer token; its role decides what the client may do. */
  token: string;
  fetch?: typeof fetch;
}

export declare class SandgateClient {
  constructor(opts: ClientOptions);
  readonly baseUrl: string;
  session(id: string): Session;
  request(method: string, path: string, opts?: RequestOptions): Promise<Response>;
  json<T = unknown>(method: string, path: string, opts?: RequestOptions): Promise<T>;
  listApprovals(opts?: { status?: string }): Promise<unknown>;
  decideApproval(id: string, decision: "approve" | "deny", reason?: string): Promise<unknown>;
  evaluate(request: Record<string, unknown>): Promise<{ risk: RiskAssessment; decision: Decision; request_id: string }>;
}

export interface FileWriteResponse {
  path: string;
  size: number;
  written: number;
  created: boolean;
  request_id: string;
}

export interface FileReadResponse {
  path: string;
  content: string;
  total_lines: number;
  truncated: boolean;
  next_offset?: number;
  request_id: string;
}

export interface FileEntry {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  modified: string;
}

export interface FileListResponse {
  path: string;
  entries: FileEntry[];
  truncated: boolean;
  request_id: string;
}

export interface FileGrepResponse {
  path: string;
  matches: { path: string; line: number; text: string }[];
  truncated: boolean;
  files_scanned: number;
  request_id: string;
}

export declare class Session {
  constructor(client: SandgateClient, id: string);
  readonly client: SandgateClient;
  readonly id: string;
  runCode(
    req: { code: string; language?: "python" | "bash" | "javascript"; timeoutS?: number; context?: Record<string, unknown> },
    opts?: RunOptions<RunCodeResponse>,
  ): Promise<RunCodeResponse>;
  execute(command: string, opts?: RunOptions<ExecuteResponse> & { timeoutS?: number }): Promise<ExecuteResponse>;
  events<R = unknown>(endpoint: "run_code" | "execute", body: Record<string, unknown>, opts?: { signal?: AbortSignal }): AsyncGenerator<StreamEvent<R>, void, undefined>;
  getFile(path: string, opts?: { signal?: AbortSignal }): Promise<Uint8Array>;
  writeFile(path: string, data: Uint8Array | string, opts?: { mode?: "overwrite" | "create" | "append"; signal?: AbortSignal }): Promise<FileWriteResponse>;
  readFile(path: string, opts?: { offset?: number; limit?: number; signal?: AbortSignal }): Promise<FileReadResponse>;
  editFile(path: string, oldText: string, newText: string, opts?: { replaceAll?: boolean; signal?: AbortSignal }): Promise<{ path: string; occurrences: number; size: number; request_id: string }>;
  listFiles(path?: string, opts?: { depth?: number; signal?: AbortSignal }): Promise<FileListResponse>;
  glob(pattern: string, opts?: { path?: string; signal?: AbortSignal }): Promise<FileListResponse>;
  grep(pattern: string, opts?: { path?: string; glob?: string; literal?: boolean; signal?: AbortSignal }): Promise<FileGrepResponse>;
  deleteFile(path: string, opts?: { recursive?: boolean; signal?: AbortSignal }): Promise<{ path: string; deleted: boolean; size: number; request_id: string }>;
  info(opts?: { signal?: AbortSignal }): Promise<Record<string, unknown>>;
  delete(opts?: { purge?: boolean; signal?: AbortSignal }): Promise<void>;
}

export declare function ndjson(body: AsyncIterable<Uint8Array>): AsyncGenerator<any, void, undefined>;
