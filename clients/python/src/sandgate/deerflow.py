"""DeerFlow's Sandbox and SandboxProvider over a sandgate gateway.

``SandgateSandbox`` has the method shapes of DeerFlow's
``deerflow.sandbox.sandbox.Sandbox`` (``execute_command``, ``read_file``,
``download_file``, ``list_dir``, ``write_file``, ``glob``, ``grep``,
``update_file``) and ``SandgateSandboxProvider`` those of its
``SandboxProvider`` (``acquire``, ``get``, ``release``), so a DeerFlow
deployment can point ``sandbox.use`` at the provider. When DeerFlow is
importable they subclass its abstract classes. Each call is one gateway
request: risk assessment, policy, approval, audit.

Paths are the session workspace's: ``/workspace/...`` (or relative to it).
DeerFlow's virtual ``/mnt/user-data`` paths are not translated; configure
DeerFlow's workspace paths as ``/workspace`` when using this provider.
"""

from __future__ import annotations

import hashlib
import importlib
import re
import shlex
import threading
import uuid
from dataclasses import dataclass
from typing import Any

from .client import SandgateClient, SandgateError, Session

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SESSION_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_SESSION_ID = 128


def _deerflow(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


@dataclass(frozen=True)
class _GrepMatch:
    """DeerFlow's GrepMatch shape (deerflow.sandbox.search)."""

    path: str
    line_number: int
    line: str


GrepMatch = _deerflow("deerflow.sandbox.search", "GrepMatch") or _GrepMatch
_Sandbox = _deerflow("deerflow.sandbox.sandbox", "Sandbox") or object
_SandboxProvider = _deerflow("deerflow.sandbox.sandbox_provider", "SandboxProvider") or object


class SandgateSandbox(_Sandbox):  # type: ignore[misc, valid-type]
    """One DeerFlow sandbox: one sandgate session."""

    #: Every command runs in a fresh shell: no state carries over.
    persistent_shell_sessions = False

    def __init__(self, sandbox_id: str, session: Session, *, timeout_s: int | None = None) -> None:
        self._id = sandbox_id
        self.session = session
        self.timeout_s = timeout_s

    @property
    def id(self) -> str:
        return self._id

    def execute_command(self, command: str, env: dict[str, str] | None = None, timeout: float | None = None) -> str:
        """Run command; the output, with ``Exit Code: n`` appended on failure.

        ``env`` is exported in front of the command (keys must be POSIX
        names, values are shell-quoted), so the gateway assesses the command
        with its environment; the audit keeps its digest, never the text.
        A refusal or an error comes back as ``Error: ...``, as DeerFlow's
        AIO sandbox reports them, so the agent reads it.
        """
        if env:
            for key in env:
                if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                    raise ValueError(f"env key {key!r} is not a valid POSIX environment variable name")
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
            command = f"export {exports}\n{command}"
        timeout_s = int(timeout) if timeout else self.timeout_s
        try:
            res = self.session.execute(command, timeout_s=timeout_s)
        except SandgateError as e:
            return f"Error: {e.code}: {e.message}"
        output = res.output
        if res.exit_code not in (0, None):
            output = f"{output}\nExit Code: {res.exit_code}" if output else f"Command exited with code {res.exit_code}"
        return output or "(no output)"

    def read_file(self, path: str, start_line: int | None = None, end_line: int | None = None) -> str:
        """The file's text, or lines start_line..end_line (1-indexed, inclusive)."""
        text = self.download_file(path).decode("utf-8", errors="replace")
        if start_line is None and end_line is None:
            return text
        lines = text.splitlines(keepends=True)
        start = max(1, start_line or 1)
        end = len(lines) if end_line is None else end_line
        return "".join(lines[start - 1:end])

    def download_file(self, path: str) -> bytes:
        """The file's bytes; OSError (FileNotFoundError, PermissionError) on failure."""
        try:
            return self.session.get_file(path)
        except SandgateError as e:
            raise _os_error(e, path) from e

    def list_dir(self, path: str, max_depth: int = 2) -> list[str]:
        """Absolute paths under path, max_depth levels deep, directories ending in /."""
        try:
            listing = self.session.list_files(path, depth=max(1, max_depth))
        except SandgateError as e:
            raise _os_error(e, path) from e
        return sorted(e.path + "/" if e.is_dir else e.path for e in listing.entries)

    def write_file(self, path: str, content: str, append: bool = False) -> None:
        try:
            self.session.write_file(path, content.encode("utf-8"), mode="append" if append else "overwrite")
        except SandgateError as e:
            raise _os_error(e, path) from e

    def update_file(self, path: str, content: bytes) -> None:
        try:
            self.session.write_file(path, content, mode="overwrite")
        except SandgateError as e:
            raise _os_error(e, path) from e

    def glob(self, path: str, pattern: str, *, include_dirs: bool = False, max_results: int = 200) -> tuple[list[str], bool]:
        """Paths under path matching pattern, and whether the list was cut."""
        try:
            listing = self.session.glob(pattern, path=path)
        except SandgateError as e:
            raise _os_error(e, path) from e
        found = [e.path for e in listing.entries if e.type == "file" or (include_dirs and e.is_dir)]
        return found[:max_results], listing.truncated or len(found) > max_results

    def grep(self, path: str, pattern: str, *, glob: str | None = None, literal: bool = False,
             case_sensitive: bool = False, max_results: int = 100) -> tuple[list[Any], bool]:
        """Matching lines under path (a regular expression unless literal)."""
        regex = re.escape(pattern) if literal else pattern
        if not case_sensitive:
            regex = "(?i)" + regex
        try:
            res = self.session.grep(regex, path=path, glob=glob, literal=False)
        except SandgateError as e:
            raise _os_error(e, path) from e
        hits = [GrepMatch(path=m.path, line_number=m.line, line=m.text) for m in res.matches]
        return hits[:max_results], res.truncated or len(hits) > max_results


class SandgateSandboxProvider(_SandboxProvider):  # type: ignore[misc, valid-type]
    """DeerFlow's SandboxProvider: one sandgate session per thread.

    ``acquire`` derives the session id from the thread (and user), so a
    thread gets its workspace back after a restart; without a thread it is
    random. ``release`` ends the session and, with ``purge_on_release``,
    deletes its workspace.
    """

    uses_thread_data_mounts = False
    needs_upload_permission_adjustment = False

    def __init__(self, base_url: str | None = None, token: str | None = None, *, client: SandgateClient | None = None,
                 session_prefix: str = "deerflow-", purge_on_release: bool = False, timeout_s: int | None = None) -> None:
        if client is None:
            if not base_url or not token:
                raise ValueError("SandgateSandboxProvider: pass base_url and token, or client")
            client = SandgateClient(base_url, token)
        self.client = client
        self.session_prefix = session_prefix
        self.purge_on_release = purge_on_release
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._sandboxes: dict[str, SandgateSandbox] = {}

    def acquire(self, thread_id: str | None = None, *, user_id: str | None = None) -> str:
        """The sandbox id of the thread's session; checks the gateway answers."""
        sandbox_id = self._session_id(thread_id, user_id)
        with self._lock:
            if sandbox_id in self._sandboxes:
                return sandbox_id
        session = self.client.session(sandbox_id)
        try:
            session.info()  # the token is valid and the gateway reachable
        except SandgateError as e:
            if e.code != "not_found":  # a session is created by its first use
                raise
        with self._lock:
            self._sandboxes.setdefault(sandbox_id, SandgateSandbox(sandbox_id, session, timeout_s=self.timeout_s))
        return sandbox_id

    def get(self, sandbox_id: str) -> SandgateSandbox | None:
        with self._lock:
            return self._sandboxes.get(sandbox_id)

    def release(self, sandbox_id: str) -> None:
        with self._lock:
            sandbox = self._sandboxes.pop(sandbox_id, None)
        session = sandbox.session if sandbox else self.client.session(sandbox_id)
        try:
            session.delete(purge=self.purge_on_release)
        except SandgateError as e:
            if e.code != "not_found":  # never used, or already gone
                raise

    def reset(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        """Release every acquired sandbox."""
        with self._lock:
            ids = list(self._sandboxes)
        for sandbox_id in ids:
            self.release(sandbox_id)

    def _session_id(self, thread_id: str | None, user_id: str | None) -> str:
        if thread_id is None:
            return self.session_prefix + uuid.uuid4().hex
        name = f"{user_id}-{thread_id}" if user_id else thread_id
        safe = _SESSION_UNSAFE.sub("-", name)
        sid = self.session_prefix + safe
        if safe != name or len(sid) > _MAX_SESSION_ID:
            # Two names that sanitise alike must not share a workspace.
            digest = hashlib.sha256(name.encode()).hexdigest()[:16]
            sid = f"{sid[:_MAX_SESSION_ID - 17]}-{digest}"
        return sid


def _os_error(e: SandgateError, path: str) -> OSError:
    """The OSError DeerFlow's tools expect for a failed file operation."""
    if e.code == "not_found":
        return FileNotFoundError(2, f"{e.message}", path)
    if e.code in {"path_traversal", "forbidden", "policy_denied", "approval_denied", "approval_timeout"}:
        return PermissionError(13, f"{e.code}: {e.message}", path)
    return OSError(f"{e.code}: {e.message}: {path}")
