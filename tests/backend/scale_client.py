"""scale_peer.py's client in the guest namespace, driven line by line
(backend_scale_interop_test, backend_exhaustion_interop_test)."""
import json
import subprocess
import sys
import threading

from tests.backend.backend_topology import H4, H6
from tests.interop import interop_util as iu

ECHO_PORT = 7010
SCALE_PEER = iu.runfile("tests/backend/scale_peer.py")


class ScaleClient:
    """scale_peer.py client in G, driven line by line."""

    def __init__(self, topo):
        self.p = subprocess.Popen(
            topo.in_ns(topo.g, sys.executable, SCALE_PEER, "client", H4,
                       str(ECHO_PORT), H6, str(ECHO_PORT)),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None,
            text=True)

    def ask(self, line, timeout):
        """Sends one command; returns its JSON answer."""
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        answer = []
        t = threading.Thread(target=lambda: answer.append(
            self.p.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not answer or not answer[0]:
            raise AssertionError(f"scale client: no answer to '{line}' in "
                                 f"{timeout} s (exit {self.p.poll()})")
        return json.loads(answer[0])

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()
        for f in (self.p.stdin, self.p.stdout):
            try:
                f.close()
            except OSError:
                pass
