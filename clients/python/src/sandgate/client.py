"""A typed client for the sandgate HTTP API (DESIGN.md §5), standard library only.

Runs (``run_code``, ``execute``) can stream: with ``on_event`` (or through
:meth:`Session.events`) the request sends ``Accept: application/x-ndjson``
and every event reaches the caller as it arrives; the result is the ``exit``
event's body, which equals the JSON response (DESIGN.md §10).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

NDJSON = "application/x-ndjson"

#: Seconds a request may wait on the socket. A run can wait for a human's
#: approval; a streamed run gets a keepalive every 12 s, a JSON one none,
#: hence the generous default.
DEFAULT_TIMEOUT = 600.0

Event = dict[str, Any]
OnEvent = Callable[[Event], None]


class SandgateError(Exception):
    """A refused request: the gateway's stable error code and safe message."""

    def __init__(self, status: int, body: Mapping[str, Any] | None) -> None:
        err = (body or {}).get("error") or {}
        self.status = status
        self.code: str = err.get("code", "unknown")
        self.message: str = err.get("message", "")
        self.reasons: list[dict[str, str]] = err.get("reasons") or []
        self.fields: list[dict[str, str]] = err.get("fields") or []
        self.request_id: str | None = err.get("request_id")
        self.body = body
        super().__init__(f"sandgate: HTTP {status} {self.code}: {self.message}".rstrip(": "))


@dataclass(frozen=True)
class Decision:
    action: str
    executor: str
    reasons: list[dict[str, str]] = field(default_factory=list)
    obligations: dict[str, Any] = field(default_factory=dict)
    policy_revision: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Decision:
        return cls(d.get("action", ""), d.get("executor", ""), list(d.get("reasons") or []),
                   dict(d.get("obligations") or {}), d.get("policy_revision", ""))


@dataclass(frozen=True)
class Risk:
    level: str
    proven_safe: bool
    patterns: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Risk:
        return cls(d.get("level", ""), bool(d.get("proven_safe")), list(d.get("patterns") or []))


@dataclass(frozen=True)
class RunResult:
    """The response of ``run_code`` or ``execute``.

    ``stdout``/``stderr`` are set for ``run_code``, ``output`` (stdout, then
    stderr lines prefixed ``[stderr] ``) for ``execute``.
    """

    exit_code: int
    truncated: bool
    timed_out: bool
    sandbox_type: str
    duration_ms: int
    risk: Risk
    decision: Decision
    approval: dict[str, Any] | None
    request_id: str
    stdout: str = ""
    stderr: str = ""
    output: str = ""
    success: bool = False
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RunResult:
        return cls(
            exit_code=int(d.get("exit_code", -1)), truncated=bool(d.get("truncated")),
            timed_out=bool(d.get("timed_out")), sandbox_type=d.get("sandbox_type", ""),
            duration_ms=int(d.get("duration_ms", 0)), risk=Risk.from_json(d.get("risk") or {}),
            decision=Decision.from_json(d.get("decision") or {}), approval=d.get("approval"),
            request_id=d.get("request_id", ""), stdout=d.get("stdout", ""), stderr=d.get("stderr", ""),
            output=d.get("output", ""), success=bool(d.get("success", d.get("exit_code") == 0)), raw=dict(d),
        )


@dataclass(frozen=True)
class FileEntry:
    path: str
    type: Literal["file", "dir", "symlink", "other"]
    size: int
    modified: str

    @property
    def is_dir(self) -> bool:
        return self.type == "dir"


@dataclass(frozen=True)
class Listing:
    path: str
    entries: list[FileEntry]
    truncated: bool


@dataclass(frozen=True)
class GrepHit:
    path: str
    line: int
    text: str


@dataclass(frozen=True)
class GrepResult:
    matches: list[GrepHit]
    truncated: bool
    files_scanned: int


@dataclass(frozen=True)
class Page:
    """A numbered-lines read (``files/read``)."""

    path: str
    content: str
    total_lines: int
    truncated: bool
    next_offset: int | None


class SandgateClient:
    """The connection to one gateway: a base URL and a bearer token."""

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        if not base_url or not token:
            raise ValueError("SandgateClient: base_url and token are required")
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.timeout = timeout
        # No proxies from the environment: the token must reach the gateway
        # named, and only it.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:  # never the token
        return f"SandgateClient({self.base_url!r})"

    def session(self, session_id: str) -> Session:
        """The handle of one session; a session is created by its first use."""
        return Session(self, session_id)

    def open(self, method: str, path: str, *, query: Mapping[str, Any] | None = None, body: bytes | None = None,
             json_body: Any = None, headers: Mapping[str, str] | None = None, timeout: float | None = None):
        """Send one request; return the open response of a 2xx answer, else raise SandgateError."""
        url = self.base_url + path
        q = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        h = {"Authorization": f"Bearer {self._token}", **(headers or {})}
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=body, headers=h, method=method)
        try:
            return self._opener.open(req, timeout=timeout or self.timeout)
        except urllib.error.HTTPError as e:
            with e:
                raise SandgateError(e.code, _json_or_none(e.read())) from None

    def json(self, method: str, path: str, **kw: Any) -> Any:
        with self.open(method, path, **kw) as res:
            data = res.read()
        return json.loads(data) if data else None

    def list_approvals(self, status: str = "pending") -> list[dict[str, Any]]:
        """``GET /v1/approvals`` (approver token)."""
        return self.json("GET", "/v1/approvals", query={"status": status})["approvals"]

    def decide_approval(self, approval_id: str, decision: Literal["approve", "deny"], reason: str = "") -> Any:
        """``POST /v1/approvals/{id}/decision`` (approver token)."""
        return self.json("POST", f"/v1/approvals/{urllib.parse.quote(approval_id, safe='')}/decision",
                         json_body={"decision": decision, "reason": reason})

    def evaluate(self, **request: Any) -> dict[str, Any]:
        """``POST /v1/policy/evaluate``: risk and decision of a would-be run; nothing runs."""
        return self.json("POST", "/v1/policy/evaluate", json_body=request)


class Session:
    """One session's endpoints: runs, workspace files, the session itself."""

    def __init__(self, client: SandgateClient, session_id: str) -> None:
        if not session_id:
            raise ValueError("Session: session_id is required")
        self.client = client
        self.id = session_id
        self._prefix = f"/v1/sessions/{urllib.parse.quote(session_id, safe='')}"

    def __repr__(self) -> str:
        return f"Session({self.id!r})"

    # -- runs -------------------------------------------------------------

    def run_code(self, code: str, language: str = "python", *, timeout_s: int | None = None,
                 context: Mapping[str, Any] | None = None, on_event: OnEvent | None = None,
                 stream: bool = False) -> RunResult:
        body = {"code": code, "language": language, "timeout_s": timeout_s, "context": dict(context or {})}
        return self._run("run_code", body, on_event, stream)

    def execute(self, command: str, *, timeout_s: int | None = None, on_event: OnEvent | None = None,
                stream: bool = False) -> RunResult:
        """Run a shell command in the workspace (deepagents' execute contract)."""
        return self._run("execute", {"command": command, "timeout_s": timeout_s}, on_event, stream)

    def _run(self, endpoint: str, body: dict[str, Any], on_event: OnEvent | None, stream: bool) -> RunResult:
        body = {k: v for k, v in body.items() if v is not None}
        if on_event is None and not stream:
            return RunResult.from_json(self.client.json("POST", f"{self._prefix}/{endpoint}", json_body=body))
        result: dict[str, Any] | None = None
        for ev in self.events(endpoint, body):
            if on_event is not None:
                on_event(ev)
            if ev.get("event") == "exit":
                result = ev.get("body") or {}
        assert result is not None  # events() ends with exit or raises
        return RunResult.from_json(result)

    def events(self, endpoint: Literal["run_code", "execute"], body: Mapping[str, Any]) -> Iterator[Event]:
        """Yield a streamed run's events as they arrive, ending with ``exit``.

        An ``error`` event raises SandgateError with the status and code the
        request would have had unstreamed, as does a refusal before the
        stream starts. Closing the generator early closes the connection,
        which cancels the run.
        """
        res = self.client.open("POST", f"{self._prefix}/{endpoint}", json_body=dict(body), headers={"Accept": NDJSON})
        with res:
            if not (res.headers.get("Content-Type") or "").startswith(NDJSON):
                yield {"event": "exit", "body": json.loads(res.read())}  # a gateway that does not stream
                return
            for line in res:  # one event a line; http.client undoes the chunking
                line = line.strip()
                if not line:
                    continue
                ev = json.loads(line)
                if ev.get("event") == "error":
                    raise SandgateError(int(ev.get("status", 500)), ev.get("body"))
                yield ev
                if ev.get("event") == "exit":
                    return
        raise SandgateError(502, {"error": {"code": "stream_incomplete", "message": "the stream ended without an exit event"}})

    # -- files ------------------------------------------------------------

    def get_file(self, path: str) -> bytes:
        """``GET files/content``: the file's bytes."""
        with self.client.open("GET", f"{self._prefix}/files/content", query={"path": path}) as res:
            return res.read()

    def write_file(self, path: str, data: bytes | str, *, mode: Literal["overwrite", "create", "append"] | None = None) -> dict[str, Any]:
        """``PUT files/content``: write raw bytes (parents created)."""
        if isinstance(data, str):
            data = data.encode()
        return self.client.json("PUT", f"{self._prefix}/files/content", query={"path": path, "mode": mode}, body=data,
                                headers={"Content-Type": "application/octet-stream"})

    def read_file(self, path: str, *, offset: int | None = None, limit: int | None = None) -> Page:
        """``GET files/read``: numbered lines from offset (0-based)."""
        d = self.client.json("GET", f"{self._prefix}/files/read", query={"path": path, "offset": offset, "limit": limit})
        return Page(d["path"], d["content"], d["total_lines"], d["truncated"], d.get("next_offset"))

    def edit_file(self, path: str, old: str, new: str, *, replace_all: bool = False) -> int:
        """``POST files/edit``; returns the number of replacements."""
        d = self.client.json("POST", f"{self._prefix}/files/edit",
                             json_body={"path": path, "old": old, "new": new, "replace_all": replace_all})
        return int(d["occurrences"])

    def list_files(self, path: str = "", *, depth: int | None = None) -> Listing:
        return _listing(self.client.json("GET", f"{self._prefix}/files/list", query={"path": path, "depth": depth}))

    def glob(self, pattern: str, *, path: str | None = None) -> Listing:
        return _listing(self.client.json("GET", f"{self._prefix}/files/glob", query={"pattern": pattern, "path": path}))

    def grep(self, pattern: str, *, path: str | None = None, glob: str | None = None, literal: bool | None = None) -> GrepResult:
        d = self.client.json("GET", f"{self._prefix}/files/grep",
                             query={"pattern": pattern, "path": path, "glob": glob, "literal": literal})
        return GrepResult([GrepHit(m["path"], m["line"], m["text"]) for m in d.get("matches") or []],
                          bool(d.get("truncated")), int(d.get("files_scanned", 0)))

    def delete_file(self, path: str, *, recursive: bool = False) -> dict[str, Any]:
        return self.client.json("DELETE", f"{self._prefix}/files", query={"path": path, "recursive": recursive or None})

    # -- the session ------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return self.client.json("GET", self._prefix)

    def delete(self, *, purge: bool = False) -> None:
        """``DELETE /v1/sessions/{id}``; purge also deletes the workspace."""
        with self.client.open("DELETE", self._prefix, query={"purge": "true" if purge else None}):
            pass


def _listing(d: Mapping[str, Any]) -> Listing:
    entries = [FileEntry(e["path"], e["type"], int(e.get("size", 0)), e.get("modified", "")) for e in d.get("entries") or []]
    return Listing(d.get("path", ""), entries, bool(d.get("truncated")))


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None
