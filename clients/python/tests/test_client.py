"""The typed client against a real gateway: runs (JSON and streamed), approvals, files, errors."""

from __future__ import annotations

import time
import unittest

from sandgate import SandgateClient, SandgateError

from .gateway import HIGH_PYTHON, Approver, Gateway, session_id

CODE = "import sys\nfor i in range(3):\n    print('line', i, flush=True)\nprint('oops', file=sys.stderr)\n"


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.gw = Gateway()

    def test_run_code_json_and_streamed(self) -> None:
        s = self.gw.agent.session(session_id("py-run"))
        plain = s.run_code(CODE)
        self.assertEqual((plain.stdout, plain.stderr, plain.exit_code, plain.success),
                         ("line 0\nline 1\nline 2\n", "oops\n", 0, True))
        self.assertEqual(plain.decision.action, "allow")
        events: list[dict] = []
        streamed = s.run_code(CODE, on_event=events.append)
        names = [e["event"] for e in events if e["event"] != "keepalive"]
        self.assertEqual(names[0], "decision", names)
        self.assertEqual(names[-1], "exit", names)
        self.assertEqual("".join(e["data"] for e in events if e["event"] == "stdout"), streamed.stdout)
        self.assertEqual("".join(e["data"] for e in events if e["event"] == "stderr"), streamed.stderr)
        seqs = [e["seq"] for e in events if "seq" in e]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual((streamed.stdout, streamed.sandbox_type), (plain.stdout, plain.sandbox_type))

    def test_execute_streams(self) -> None:
        s = self.gw.agent.session(session_id("py-exec"))
        chunks: list[str] = []
        res = s.execute("echo out; echo err >&2; exit 3",
                        on_event=lambda e: e["event"] == "stdout" and chunks.append(e["data"]))
        self.assertEqual((res.output, res.exit_code), ("out\n[stderr] err\n", 3))
        self.assertEqual("".join(chunks), "out\n")

    def test_closing_a_stream_cancels_the_run(self) -> None:
        s = self.gw.agent.session(session_id("py-cancel"))
        events = s.events("execute", {"command": "echo started; sleep 60; echo finished"})
        for ev in events:
            if ev["event"] == "stdout":
                break
        self.assertEqual(s.info()["running"], 1, "the run is under way")
        events.close()  # the client goes away mid-run
        deadline = time.monotonic() + 30
        info = s.info()
        while info["running"] and time.monotonic() < deadline:
            time.sleep(0.1)
            info = s.info()
        self.assertEqual((info["running"], info["runs"]), (0, 1), info)

    def test_held_run_approved_through_the_stream(self) -> None:
        sid = session_id("py-held")
        approver = Approver(self.gw, sid, "approve")
        approver.start()
        events: list[dict] = []
        res = self.gw.agent.session(sid).run_code(HIGH_PYTHON, on_event=events.append)
        approver.join()
        self.assertIsNone(approver.error)
        names = [e["event"] for e in events if e["event"] in ("decision", "approval_pending", "approval_resolved", "exit")]
        self.assertEqual(names, ["decision", "approval_pending", "approval_resolved", "exit"])
        self.assertEqual(events[1]["approval"]["id"], approver.decided)
        self.assertEqual(res.stdout, "hi\n\n", res.raw)
        self.assertEqual(res.approval["status"], "approved")

    def test_errors_carry_the_stable_code(self) -> None:
        sid = session_id("py-err")
        s = self.gw.agent.session(sid)
        for stream in (False, True):
            with self.assertRaises(SandgateError) as cm:
                s.run_code("print(1)", "cobol", stream=stream)
            self.assertEqual((cm.exception.status, cm.exception.code), (400, "invalid_request"))
            self.assertTrue(cm.exception.request_id)
        approver = Approver(self.gw, sid, "deny")
        approver.start()
        with self.assertRaises(SandgateError) as cm:
            s.run_code(HIGH_PYTHON, stream=True)
        approver.join()
        self.assertEqual((cm.exception.status, cm.exception.code), (403, "approval_denied"))
        with self.assertRaises(SandgateError) as cm:
            s.get_file("/etc/passwd")
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "path_traversal"))
        with self.assertRaises(SandgateError) as cm:
            SandgateClient(self.gw.url, "not-a-token").session("x").list_files()
        self.assertEqual((cm.exception.status, cm.exception.code), (401, "unauthorized"))
        self.assertNotIn("not-a-token", repr(SandgateClient(self.gw.url, "not-a-token")))

    def test_files(self) -> None:
        s = self.gw.agent.session(session_id("py-files"))
        self.assertTrue(s.write_file("/workspace/docs/a.txt", "alpha\nbeta\n")["created"])
        s.write_file("docs/a.txt", "gamma\n", mode="append")
        with self.assertRaises(SandgateError):
            s.write_file("docs/a.txt", "x", mode="create")
        page = s.read_file("docs/a.txt", offset=1, limit=1)
        self.assertEqual((page.content, page.total_lines), ("     2\tbeta", 3))
        self.assertEqual(s.edit_file("docs/a.txt", "beta", "BETA"), 1)
        with self.assertRaises(SandgateError) as cm:
            s.edit_file("docs/a.txt", "nope", "x")
        self.assertEqual(cm.exception.code, "edit_no_match")
        self.assertEqual([(e.path, e.type) for e in s.list_files("/workspace").entries], [("/workspace/docs", "dir")])
        self.assertEqual([e.path for e in s.glob("**/*.txt").entries], ["/workspace/docs/a.txt"])
        self.assertEqual([(m.path, m.line, m.text) for m in s.grep("BETA", path="/workspace").matches],
                         [("/workspace/docs/a.txt", 2, "BETA")])
        self.assertEqual(s.get_file("docs/a.txt"), b"alpha\nBETA\ngamma\n")
        self.assertTrue(s.delete_file("docs", recursive=True)["deleted"])
        self.assertEqual(s.list_files().entries, [])
        self.assertEqual(s.info()["id"], s.id)
        s.delete(purge=True)


if __name__ == "__main__":
    unittest.main()
