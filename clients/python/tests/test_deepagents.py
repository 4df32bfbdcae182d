"""SandgateBackend, deepagents' SandboxBackendProtocol shape, against a real gateway."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

from sandgate.deepagents import DEEPAGENTS, REFUSED_EXIT, SandgateBackend

from .gateway import HIGH_SHELL, Approver, Gateway, session_id

APP = 'import os\nprint("hello from app")\nprint(os.getcwd())\n'
NOTES = "first line\nTODO: ship it\nlast line\n"


class BackendTest(unittest.TestCase):
    """Every protocol operation, in order, on one session; execute streamed or not."""

    stream = False

    @classmethod
    def setUpClass(cls) -> None:
        cls.gw = Gateway()
        cls.events: list[dict] = []
        cls.b = SandgateBackend(cls.gw.url, cls.gw.token, session_id=session_id("py-da"), timeout_s=60,
                                on_event=cls.events.append if cls.stream else None)

    def test_operations(self) -> None:
        b = self.b
        self.assertEqual(b.id, b.session.id)
        # write, upload_files (partial success)
        self.assertEqual((b.write("/workspace/src/app.py", APP).path, b.write("/workspace/notes/todo.txt", NOTES).error),
                         ("/workspace/src/app.py", None))
        up = b.upload_files([("/workspace/src/lib/util.py", b"def f():\n    return 1\n"), ("/etc/escape", b"no")])
        self.assertEqual([(u.path, u.error) for u in up], [("/workspace/src/lib/util.py", None), ("/etc/escape", "invalid_path")])
        # read: raw lines of the window, with pagination
        r = b.read("/workspace/notes/todo.txt", 1, 1)
        self.assertEqual((r.error, r.file_data["content"], r.start_line, r.end_line, r.total_lines, r.next_offset),
                         (None, "TODO: ship it\n", 2, 2, 3, 2))
        self.assertEqual(b.read("/workspace/src/app.py").file_data["content"], APP)
        self.assertEqual(b.read("/workspace/missing.txt").error, "File '/workspace/missing.txt' not found")
        # edit
        self.assertEqual(b.edit("/workspace/src/app.py", "hello from app", "hello from sandgate").occurrences, 1)
        self.assertEqual(b.edit("/workspace/src/app.py", "absent", "x").error, "Error: String not found in file: 'absent'")
        # ls, grep, glob
        ls = b.ls("/workspace")
        self.assertEqual({e["path"]: e["is_dir"] for e in ls.entries}, {"/workspace/src/": True, "/workspace/notes/": True})
        self.assertEqual(b.grep("TODO:", "/workspace").matches,
                         [{"path": "/workspace/notes/todo.txt", "line": 2, "text": "TODO: ship it"}])
        self.assertEqual([m["path"] for m in b.grep("sandgate", "/workspace", "*.py").matches], ["/workspace/src/app.py"])
        self.assertTrue(b.grep("e", "/workspace", max_count=1).truncated)
        self.assertEqual(sorted(m["path"] for m in b.glob("**/*.py", "/workspace").matches),
                         ["/workspace/src/app.py", "/workspace/src/lib/util.py"])
        # execute: output, exit code, working directory, streaming
        self.events.clear()
        ex = b.execute("python3 src/app.py; echo err >&2; exit 3")
        self.assertEqual((ex.output, ex.exit_code, ex.truncated), ("hello from sandgate\n/workspace\n[stderr] err\n", 3, False))
        names = [e["event"] for e in self.events]
        if self.stream:
            self.assertIn("stdout", names)
            self.assertEqual(names[-1], "exit")
        else:
            self.assertEqual(names, [])
        # a refusal is output, not an exception
        approver = Approver(self.gw, b.id, "deny")
        approver.start()
        refused = b.execute(HIGH_SHELL)
        approver.join()
        self.assertIsNone(approver.error)
        self.assertEqual(refused.exit_code, REFUSED_EXIT)
        self.assertIn("approval_denied", refused.output)
        # download_files (partial success), delete
        b.execute("mkdir -p out && printf 'made by code\\n' > out/result.txt")
        dl = b.download_files(["/workspace/out/result.txt", "/workspace/missing.bin"])
        self.assertEqual([(d.content, d.error) for d in dl], [(b"made by code\n", None), (None, "file_not_found")])
        self.assertEqual(b.delete("/workspace/out").path, "/workspace/out")
        self.assertEqual(b.delete("/workspace/out").error, "Error: '/workspace/out' not found")
        # the async twins
        self.assertEqual(asyncio.run(b.aread("/workspace/notes/todo.txt", 0, 1)).file_data["content"], "first line\n")
        self.assertEqual(asyncio.run(b.aexecute("echo async")).output, "async\n")
        b.close(purge=True)


class StreamedBackendTest(BackendTest):
    stream = True


class DeepagentsImportTest(unittest.TestCase):
    """With deepagents importable, SandgateBackend subclasses its BaseSandbox and returns its types."""

    def test_subclasses_base_sandbox(self) -> None:
        if DEEPAGENTS:  # the real one is installed here: check it directly
            from deepagents.backends.sandbox import BaseSandbox

            self.assertTrue(issubclass(SandgateBackend, BaseSandbox))
            return
        # A stand-in with deepagents' module layout (the real package comes
        # from PyPI, which this suite never uses), in a fresh interpreter.
        with tempfile.TemporaryDirectory() as d:
            pkg = Path(d, "deepagents", "backends")
            pkg.mkdir(parents=True)
            Path(d, "deepagents", "__init__.py").write_text("")
            Path(pkg, "__init__.py").write_text("")
            Path(pkg, "protocol.py").write_text(textwrap.dedent("""
                from dataclasses import dataclass
                @dataclass
                class ExecuteResponse:
                    output: str
                    exit_code: int | None = None
                    truncated: bool = False
                    marker: str = "deepagents"
            """))
            Path(pkg, "sandbox.py").write_text(textwrap.dedent("""
                from abc import ABC, abstractmethod
                class BaseSandbox(ABC):
                    @abstractmethod
                    def execute(self, command, *, timeout=None): ...
                    @property
                    @abstractmethod
                    def id(self): ...
                    @abstractmethod
                    def upload_files(self, files): ...
                    @abstractmethod
                    def download_files(self, paths): ...
            """))
            src = Path(__file__).resolve().parent.parent / "src"
            probe = textwrap.dedent("""
                from deepagents.backends.sandbox import BaseSandbox
                import sandgate.deepagents as m
                b = m.SandgateBackend("http://127.0.0.1:1", "t", session_id="s")
                assert isinstance(b, BaseSandbox) and m.DEEPAGENTS
                assert m.ExecuteResponse("x").marker == "deepagents"
                assert m.ReadResult().error is None  # the look-alike where deepagents lacks one
                print("ok")
            """)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([d, str(src)])}
            out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
            self.assertEqual(out.stdout.strip(), "ok", out.stderr)


if __name__ == "__main__":
    unittest.main()
