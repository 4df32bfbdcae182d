"""The gateway the suites run against, from the environment e2e/clients_test.go sets up.

SANDGATE_URL, SANDGATE_TOKEN (agent), SANDGATE_APPROVER_TOKEN, SANDGATE_MODE.
Without them the suites skip, or fail when SANDGATE_REQUIRE_NPM_CLIENTS=1
(make test).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import unittest

from sandgate import SandgateClient

#: HIGH in both modes: a process spawn, so the policy asks a human.
HIGH_PYTHON = "import subprocess\nprint(subprocess.run(['echo','hi'],capture_output=True).stdout.decode())"
HIGH_SHELL = "nc -l 80"


class Gateway:
    def __init__(self) -> None:
        env = os.environ
        names = ("SANDGATE_URL", "SANDGATE_TOKEN", "SANDGATE_APPROVER_TOKEN", "SANDGATE_MODE")
        if not all(env.get(n) for n in names):
            msg = "no gateway: run through `go test ./e2e -run TestClients` (sets SANDGATE_URL and friends)"
            if env.get("SANDGATE_REQUIRE_NPM_CLIENTS") == "1":
                raise RuntimeError(msg)
            raise unittest.SkipTest(msg)
        self.url = env["SANDGATE_URL"]
        self.token = env["SANDGATE_TOKEN"]
        self.mode = env["SANDGATE_MODE"]
        self.agent = SandgateClient(self.url, self.token)
        self.approver = SandgateClient(self.url, env["SANDGATE_APPROVER_TOKEN"])


def session_id(prefix: str) -> str:
    """A fresh session name, so tests never share a workspace."""
    return f"{prefix}-{secrets.token_hex(6)}"


class Approver(threading.Thread):
    """Decides the first approval of a session, as an approver watching the list would."""

    def __init__(self, gw: Gateway, session: str, decision: str) -> None:
        super().__init__(daemon=True)
        self.gw, self.session, self.decision = gw, session, decision
        self.decided: str | None = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for a in self.gw.approver.list_approvals():
                    if a.get("session_id") == self.session:
                        self.gw.approver.decide_approval(a["id"], self.decision, "python test")
                        self.decided = a["id"]
                        return
                time.sleep(0.1)
            raise TimeoutError(f"no pending approval for session {self.session}")
        except BaseException as e:  # reported by the test through .error
            self.error = e
