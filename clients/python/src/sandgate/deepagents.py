"""SandgateBackend: a deepagents sandbox backend over a sandgate gateway.

It has the shape of deepagents' ``SandboxBackendProtocol`` (``id``,
``execute``, ``upload_files``, ``download_files``, and the file operations
``BaseSandbox`` derives: ``ls``, ``read``, ``write``, ``edit``, ``grep``,
``glob``, ``delete``, with their ``a``-prefixed async twins), and when the
``deepagents`` package is importable it subclasses
``deepagents.backends.sandbox.BaseSandbox`` and returns deepagents' own
result types. Without deepagents it returns look-alike dataclasses with the
same fields, so the package installs anywhere.

Where ``BaseSandbox`` derives the file operations from shell commands, this
backend sends them to the gateway's workspace API instead: no interpreter
is needed in the sandbox, and each operation is still one request the
gateway authorises and audits. Results follow deepagents' 0.7 protocol.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .client import Event, SandgateClient, SandgateError, Session

#: The exit code ``execute`` reports for a command the gateway refused.
REFUSED_EXIT = 126

# A refusal is reported as the command's output, so the model reads why and
# can change course; any other failure (a bad token, an outage) raises.
_REFUSALS = frozenset({"policy_denied", "approval_denied", "approval_timeout", "approval_unavailable"})

# The gateway's codes that are per-file failures, as deepagents'
# FileOperationError literals.
_FILE_ERRORS = {
    "not_found": "file_not_found",
    "path_traversal": "invalid_path",
    "invalid_request": "invalid_path",
    "forbidden": "permission_denied",
    "policy_denied": "permission_denied",
    "file_too_large": "permission_denied",
    "quota_exceeded": "permission_denied",
}


# -- result types, when deepagents is not importable ------------------------


@dataclass
class ExecuteResponse:
    output: str
    exit_code: int | None = None
    truncated: bool = False


@dataclass
class FileUploadResponse:
    path: str
    error: str | None = None


@dataclass
class FileDownloadResponse:
    path: str
    content: bytes | None = None
    error: str | None = None


@dataclass
class ReadResult:
    error: str | None = None
    file_data: dict[str, Any] | None = None
    total_lines: int | None = None
    start_line: int | None = None
    end_line: int | None = None
    next_offset: int | None = None
    no_lines_requested: bool = False


@dataclass
class WriteResult:
    error: str | None = None
    path: str | None = None


@dataclass
class EditResult:
    error: str | None = None
    path: str | None = None
    occurrences: int | None = None


@dataclass
class DeleteResult:
    error: str | None = None
    path: str | None = None


@dataclass
class LsResult:
    error: str | None = None
    entries: list[dict[str, Any]] | None = None


@dataclass
class GrepResult:
    error: str | None = None
    matches: list[dict[str, Any]] | None = None
    truncated: bool = False


@dataclass
class GlobResult:
    error: str | None = None
    matches: list[dict[str, Any]] | None = None
    truncated: bool = False


def _deepagents() -> tuple[type | None, Any]:
    """deepagents' BaseSandbox and protocol module, or (None, None)."""
    try:
        sandbox = importlib.import_module("deepagents.backends.sandbox")
        protocol = importlib.import_module("deepagents.backends.protocol")
    except ImportError:
        return None, None
    return getattr(sandbox, "BaseSandbox", None), protocol


_BaseSandbox, _protocol = _deepagents()
DEEPAGENTS = _BaseSandbox is not None

# deepagents' own result types where it has them (an older deepagents may
# lack some; those keep the look-alikes).
for _name in ("ExecuteResponse", "FileUploadResponse", "FileDownloadResponse", "ReadResult", "WriteResult",
              "EditResult", "DeleteResult", "LsResult", "GrepResult", "GlobResult"):
    if _protocol is not None and hasattr(_protocol, _name):
        globals()[_name] = getattr(_protocol, _name)


class _AsyncTwins:
    """The async methods deepagents' BackendProtocol gives, for when it is absent."""

    async def aexecute(self, command: str, *, timeout: int | None = None):
        return await asyncio.to_thread(self.execute, command, timeout=timeout)

    async def als(self, path: str):
        return await asyncio.to_thread(self.ls, path)

    async def aread(self, file_path: str, offset: int = 0, limit: int = 2000):
        return await asyncio.to_thread(self.read, file_path, offset, limit)

    async def awrite(self, file_path: str, content: str):
        return await asyncio.to_thread(self.write, file_path, content)

    async def aedit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False):
        return await asyncio.to_thread(self.edit, file_path, old_string, new_string, replace_all)

    async def agrep(self, pattern: str, path: str | None = None, glob: str | None = None, *, max_count: int | None = None):
        return await asyncio.to_thread(self.grep, pattern, path, glob, max_count=max_count)

    async def aglob(self, pattern: str, path: str | None = None):
        return await asyncio.to_thread(self.glob, pattern, path)

    async def adelete(self, file_path: str):
        return await asyncio.to_thread(self.delete, file_path)

    async def aupload_files(self, files: list[tuple[str, bytes]]):
        return await asyncio.to_thread(self.upload_files, files)

    async def adownload_files(self, paths: list[str]):
        return await asyncio.to_thread(self.download_files, paths)


_Base: type = _BaseSandbox if _BaseSandbox is not None else _AsyncTwins


class SandgateBackend(_Base):  # type: ignore[misc, valid-type]
    """A deepagents sandbox whose every operation is a sandgate request.

    ``session_id`` names the session: the sandbox's id and its workspace
    (``/workspace`` for every executor). ``on_event`` receives the events of
    each streamed ``execute`` (``decision``, ``approval_pending``,
    ``stdout``, ...); with it, or with ``stream=True``, execute streams.
    """

    def __init__(self, base_url: str | None = None, token: str | None = None, *, session_id: str,
                 client: SandgateClient | None = None, timeout_s: int | None = None, stream: bool = False,
                 on_event: Callable[[Event], None] | None = None) -> None:
        if client is None:
            if not base_url or not token:
                raise ValueError("SandgateBackend: pass base_url and token, or client")
            client = SandgateClient(base_url, token)
        self.client = client
        self.session: Session = client.session(session_id)
        self.timeout_s = timeout_s
        self.stream = stream or on_event is not None
        self.on_event = on_event

    @property
    def id(self) -> str:
        return self.session.id

    def execute(self, command: str, *, timeout: int | None = None) -> ExecuteResponse:
        """Run command in the workspace; a refusal is output with exit code REFUSED_EXIT."""
        try:
            res = self.session.execute(command, timeout_s=timeout or self.timeout_s, on_event=self.on_event,
                                       stream=self.stream)
        except SandgateError as e:
            if e.code in _REFUSALS:
                return ExecuteResponse(output=f"sandgate refused this command ({e.code}): {e.message}",
                                       exit_code=REFUSED_EXIT, truncated=False)
            raise
        return ExecuteResponse(output=res.output, exit_code=res.exit_code, truncated=res.truncated)

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        """Write each file (parents created); partial success."""
        out = []
        for path, content in files:
            try:
                self.session.write_file(path, content)
                out.append(FileUploadResponse(path=path, error=None))
            except SandgateError as e:
                out.append(FileUploadResponse(path=path, error=_file_error(e)))
        return out

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        """Read each file's bytes; partial success."""
        out = []
        for path in paths:
            try:
                out.append(FileDownloadResponse(path=path, content=self.session.get_file(path), error=None))
            except SandgateError as e:
                out.append(FileDownloadResponse(path=path, content=None, error=_file_error(e)))
        return out

    def ls(self, path: str) -> LsResult:
        try:
            listing = self.session.list_files(path)
        except SandgateError as e:
            return LsResult(error=_op_error(e, path))
        return LsResult(entries=[_file_info(e, listing_dir=True) for e in listing.entries])

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        """The raw lines [offset, offset+limit) of the file; deepagents numbers them."""
        offset = max(0, offset)
        if limit <= 0:
            return ReadResult(file_data={"content": "", "encoding": "utf-8"}, no_lines_requested=True)
        try:
            data = self.session.get_file(file_path)
        except SandgateError as e:
            if e.code == "not_found":
                return ReadResult(error=f"File '{file_path}' not found")
            return ReadResult(error=_op_error(e, file_path))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ReadResult(file_data={"content": base64.b64encode(data).decode("ascii"), "encoding": "base64"})
        lines = text.splitlines(keepends=True)
        window = lines[offset:offset + limit]
        content = "".join(window)
        if not window:
            if offset and offset >= len(lines):
                return ReadResult(error=f"Line offset {offset} exceeds file length ({len(lines)} lines)")
            return ReadResult(file_data={"content": content, "encoding": "utf-8"})
        end = offset + len(window)
        return ReadResult(file_data={"content": content, "encoding": "utf-8"}, total_lines=len(lines),
                          start_line=offset + 1, end_line=end, next_offset=end if end < len(lines) else None)

    def write(self, file_path: str, content: str) -> WriteResult:
        try:
            self.session.write_file(file_path, content.encode("utf-8"))
        except SandgateError as e:
            return WriteResult(error=f"Failed to write to {file_path}: {_op_error(e, file_path)}")
        return WriteResult(path=file_path)

    def edit(self, file_path: str, old_string: str, new_string: str, replace_all: bool = False) -> EditResult:
        try:
            n = self.session.edit_file(file_path, old_string, new_string, replace_all=replace_all)
        except SandgateError as e:
            msg = {
                "not_found": f"Error: File '{file_path}' not found",
                "edit_no_match": f"Error: String not found in file: '{old_string}'",
                "edit_ambiguous": f"Error: String '{old_string}' appears multiple times. "
                                  "Use replace_all=True to replace all occurrences.",
            }.get(e.code)
            return EditResult(error=msg or _op_error(e, file_path))
        return EditResult(path=file_path, occurrences=n)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None, *,
             max_count: int | None = None) -> GrepResult:
        """Literal search, as deepagents' grep is."""
        try:
            res = self.session.grep(pattern, path=path, glob=glob, literal=True)
        except SandgateError as e:
            return GrepResult(error=_op_error(e, path or "/workspace"))
        matches = [{"path": m.path, "line": m.line, "text": m.text} for m in res.matches]
        truncated = res.truncated
        if max_count is not None and len(matches) > max_count:
            matches, truncated = matches[:max_count], True
        return GrepResult(matches=matches, truncated=truncated)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        """Regular files matching pattern under path (directories never match)."""
        try:
            listing = self.session.glob(pattern, path=path)
        except SandgateError as e:
            return GlobResult(error=_op_error(e, path or "/workspace"))
        return GlobResult(matches=[_file_info(e) for e in listing.entries if e.type == "file"],
                          truncated=listing.truncated)

    def delete(self, file_path: str) -> DeleteResult:
        """Delete a file or a directory with everything under it."""
        try:
            self.session.delete_file(file_path, recursive=True)
        except SandgateError as e:
            if e.code == "not_found":
                return DeleteResult(error=f"Error: '{file_path}' not found")
            return DeleteResult(error=f"Error deleting '{file_path}': {_op_error(e, file_path)}")
        return DeleteResult(path=file_path)

    def close(self, *, purge: bool = False) -> None:
        """End the session (and delete its workspace when purge)."""
        self.session.delete(purge=purge)


def _file_info(e, *, listing_dir: bool = False) -> dict[str, Any]:
    path = e.path + "/" if listing_dir and e.is_dir else e.path
    return {"path": path, "is_dir": e.is_dir, "size": e.size, "modified_at": e.modified}


def _file_error(e: SandgateError) -> str:
    mapped = _FILE_ERRORS.get(e.code)
    if mapped is None:
        raise e
    return mapped


def _op_error(e: SandgateError, path: str) -> str:
    """The message a file operation's result carries; outages still raise."""
    if e.code in _FILE_ERRORS or e.code in _REFUSALS or e.code in {"binary_file", "edit_no_match", "edit_ambiguous"}:
        return f"{e.code}: {e.message} ({path})"
    raise e
