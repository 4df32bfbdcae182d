"""SandgateSandboxProvider and SandgateSandbox, DeerFlow's shapes: acquire, every method, release."""

from __future__ import annotations

import unittest

from sandgate import SandgateError
from sandgate.deerflow import SandgateSandbox, SandgateSandboxProvider

from .gateway import HIGH_SHELL, Approver, Gateway, session_id


class ProviderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.gw = Gateway()

    def test_acquire_every_method_release(self) -> None:
        provider = SandgateSandboxProvider(self.gw.url, self.gw.token, purge_on_release=True)
        thread = session_id("thread")
        sid = provider.acquire(thread, user_id="alice")
        self.assertEqual(sid, f"deerflow-alice-{thread}")
        self.assertEqual(provider.acquire(thread, user_id="alice"), sid, "a thread keeps its sandbox")
        self.assertNotEqual(provider.acquire(thread, user_id="bob"), sid, "another user's thread does not share it")
        sb = provider.get(sid)
        self.assertIsInstance(sb, SandgateSandbox)
        self.assertEqual(sb.id, sid)
        self.assertIsNone(provider.get("deerflow-never-acquired"))

        sb.write_file("/workspace/report/notes.md", "# Notes\nalpha\n")
        sb.write_file("/workspace/report/notes.md", "Beta line\n", append=True)
        sb.update_file("/workspace/report/data.bin", b"\x00\x01binary")
        self.assertEqual(sb.read_file("/workspace/report/notes.md"), "# Notes\nalpha\nBeta line\n")
        self.assertEqual(sb.read_file("/workspace/report/notes.md", start_line=2, end_line=3), "alpha\nBeta line\n")
        self.assertEqual(sb.download_file("/workspace/report/data.bin"), b"\x00\x01binary")
        with self.assertRaises(FileNotFoundError):
            sb.read_file("/workspace/report/missing.md")
        with self.assertRaises(PermissionError):
            sb.download_file("/etc/passwd")
        self.assertEqual(sb.list_dir("/workspace"), ["/workspace/report/", "/workspace/report/data.bin",
                                                     "/workspace/report/notes.md"])
        self.assertEqual(sb.list_dir("/workspace", max_depth=1), ["/workspace/report/"])
        with self.assertRaises(FileNotFoundError):
            sb.list_dir("/workspace/nope")
        self.assertEqual(sb.glob("/workspace", "**/*.md"), (["/workspace/report/notes.md"], False))
        self.assertEqual(sb.glob("/workspace", "report/*", max_results=1), (["/workspace/report/data.bin"], True))
        hits, truncated = sb.grep("/workspace", "beta")  # DeerFlow's default: a case-insensitive regex
        self.assertEqual([(h.path, h.line_number, h.line) for h in hits], [("/workspace/report/notes.md", 3, "Beta line")])
        self.assertFalse(truncated)
        self.assertEqual(sb.grep("/workspace", "beta", case_sensitive=True), ([], False))
        self.assertEqual(len(sb.grep("/workspace", "a.", literal=True)[0]), 0)
        self.assertEqual(sb.execute_command("cat report/notes.md | wc -l"), "3\n")
        greeting = "it's \"quoted\"; echo injected & more"
        self.assertEqual(sb.execute_command('echo "$GREETING"', env={"GREETING": greeting}), greeting + "\n")
        self.assertEqual(sb.execute_command("exit 4"), "Command exited with code 4")
        self.assertEqual(sb.execute_command("echo partial; exit 2"), "partial\n\nExit Code: 2")
        self.assertEqual(sb.execute_command("true"), "(no output)")
        with self.assertRaises(ValueError):
            sb.execute_command("true", env={"BAD-NAME": "x"})
        approver = Approver(self.gw, sid, "deny")
        approver.start()
        refused = sb.execute_command(HIGH_SHELL)
        approver.join()
        self.assertIsNone(approver.error)
        self.assertTrue(refused.startswith("Error: approval_denied"), refused)

        provider.release(sid)
        self.assertIsNone(provider.get(sid))
        with self.assertRaises(SandgateError) as cm:  # purged with its workspace
            self.gw.agent.session(sid).info()
        self.assertEqual(cm.exception.code, "not_found")
        provider.release(sid)  # idempotent
        provider.shutdown()


if __name__ == "__main__":
    unittest.main()
