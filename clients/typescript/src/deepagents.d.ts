// Types of SandgateSandbox (deepagents.js), checked by `npm test` against
// the pinned deepagents' own declarations.
import { BaseSandbox, type ExecuteResponse, type FileDownloadResponse, type FileUploadResponse } from "deepagents";

import type { SandgateClient, Session, StreamEvent } from "./index.js";

export declare const REFUSED_EXIT: 126;

export interface SandgateSandboxOptions {
  /** The gateway's URL; or pass client. */
  baseUrl?: string;
  /** An agent token; or pass client. */
  token?: string;
  /** The session: the sandbox's id and its workspace. */
  sessionId: string;
  /** Each command's timeout in seconds (the policy caps it). */
  timeoutS?: number;
  /** Stream execute's output (Accept: application/x-ndjson). */
  stream?: boolean;
  /** Every streamed event as it arrives; implies stream. */
  onEvent?: (ev: StreamEvent) => void;
  client?: SandgateClient;
}

export declare class SandgateSandbox extends BaseSandbox {
  constructor(opts: SandgateSandboxOptions);
  readonly client: SandgateClient;
  readonly session: Session;
  get id(): string;
  execute(command: string, opts?: { timeout?: number }): Promise<ExecuteResponse>;
  uploadFiles(files: Array<[string, Uint8Array]>): Promise<FileUploadResponse[]>;
  downloadFiles(paths: string[]): Promise<FileDownloadResponse[]>;
  /** Ends the session; purge also deletes its workspace. */
  close(opts?: { purge?: boolean }): Promise<void>;
}
