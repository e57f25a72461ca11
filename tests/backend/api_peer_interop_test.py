"""The forward API is the operator's, not CMD's (review 2026-12-06,
finding 5).

netstackd --forward-api PATH -- CMD runs in H (BackendTopology: only lo and
a veth into an empty sink namespace, no default route; asserted before
each start), as root and as uid 65534. CMD sees the host's files and runs
as netstackd's user, so it can open the API's socket. It asks to publish a
host port ({"op":"add","proto":"tcp","spec":"18080:8080"}) and to list
the forwards. netstackd refuses it by PID namespace: CMD's connections are
closed at once without an answer, counted (forward_api.refused_peers) and
logged once. The operator still lists, adds and reads the counters: this
test itself for the root run; for the uid-65534 run a client of that uid,
the socket's owner (netstackd refuses a client it may not inspect, and
after setup it has no capability left to inspect another user's).

Each run checks, after netstackd exits, that nothing is left: no process
of the run, no API socket file, no new link in H. The uid-65534 run sets
/dev/net/tun to 0666 for its time (restored after).
Needs root, setpriv, unshare, nsenter.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from tests.backend.backend_topology import BackendTopology
from tests.backend.sandbox_util import (NOBODY, SYSTEM_PYTHON as PYTHON,
                                        TunMode, netstackd_copy)
from tests.interop import interop_util as iu


# CMD: one connection per request; what came back on each.
CMD = r"""
import json, socket, sys
path = sys.argv[1]

def ask(request, where=path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(where)
        s.sendall((json.dumps(request) + "\n").encode())
        data = s.recv(65536)
        return "answer " + data.decode().strip() if data else "closed"
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        return "no answer in 5 s"
    except OSError as e:
        return "error " + str(e)
    finally:
        s.close()

# The API's own path is covered in CMD's mount namespace (/dev/null is
# bound over it): not a socket there.
print("covered:", ask({"op": "list"}), flush=True)
print("up", flush=True)
# The test then makes a hard link to the socket where CMD can reach it:
# the way past the cover that a same-uid CMD might find (a link made
# before the start, another bind mount). The PID namespace check stops it.
sys.stdin.readline()
link = sys.argv[2]
print("add:", ask({"op": "add", "proto": "tcp", "spec": "18080:8080"}, link),
      flush=True)
print("list:", ask({"op": "list"}, link), flush=True)
sys.stdin.readline()
"""

# The operator: its requests in order on one connection, the answers as a
# JSON list.
OPERATOR = r"""
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(10)
s.connect(sys.argv[1])
f = s.makefile("rw")
out = []
for request in json.loads(sys.argv[2]):
    f.write(json.dumps(request) + "\n")
    f.flush()
    out.append(json.loads(f.readline()))
print(json.dumps(out))
"""


class ApiPeerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if os.geteuid() != 0:
            raise unittest.SkipTest("needs root")
        for tool in ("setpriv", "unshare", "nsenter", PYTHON):
            if not iu.have(tool):
                raise unittest.SkipTest(f"needs {tool}")
        cls.topo = BackendTopology()
        cls.tmp = tempfile.mkdtemp(prefix="nst-apipeer-")
        os.chmod(cls.tmp, 0o755)
        try:
            cls.topo.setup()
            cls.netstackd = netstackd_copy(cls.tmp)
        except BaseException:
            cls.topo.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.topo.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def args(self, *args, wrap=()):
        cmd = self.topo.sandbox_args(*args, wrap=wrap)
        return [self.netstackd if a == iu.NETSTACKD else a for a in cmd]

    def operator(self, path, requests, wrap=()):
        p = subprocess.run([*wrap, PYTHON, "-c", OPERATOR, path,
                            json.dumps(requests)],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def check_cmd_is_refused(self, label, wrap, uid):
        marker = f"nstapipeer{os.getpid()}x{uid}"
        apidir = os.path.join(self.tmp, f"api{uid}")
        os.mkdir(apidir, 0o700)
        os.chown(apidir, uid, uid)
        path = os.path.join(apidir, "api.sock")
        linkdir = os.path.join(self.tmp, f"link{uid}")
        os.mkdir(linkdir, 0o755)
        link = os.path.join(linkdir, "api.sock")
        links_before = self.topo.links(self.topo.h)
        p = subprocess.Popen(
            self.args("--forward-api", path, "--", PYTHON, "-c", CMD, path,
                      link, marker, wrap=wrap),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            said = {}

            def read(n):
                for _ in range(n):
                    line = p.stdout.readline().strip()
                    key, _, value = line.partition(": ")
                    said[key] = value

            read(2)
            if "up" not in said:
                p.kill()
                p.wait()
                self.fail(f"{label}: CMD did not run: {said} "
                          f"{p.stderr.read()}")
            os.link(path, link)
            p.stdin.write("\n")
            p.stdin.flush()
            read(2)
            # The operator, after CMD's attempts: the only forward is its
            # own, and the two refusals are counted.
            answers = self.operator(path, [
                {"op": "list"},
                {"op": "add", "proto": "tcp", "spec": "18081:8080"},
                {"op": "list"},
                {"op": "counters"},
            ], wrap=wrap)
            p.stdin.write("\n")
            p.stdin.flush()
            rc = p.wait(timeout=20)
            err = p.stderr.read()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                f.close()
        self.assertEqual(said.get("covered"),
                         "error [Errno 111] Connection refused",
                         f"{label}: the API's own path, covered: {said}")
        self.assertEqual(said.get("add"), "closed",
                         f"{label}: CMD's add was not refused: {said}")
        self.assertEqual(said.get("list"), "closed",
                         f"{label}: CMD's list was not refused: {said}")
        self.assertEqual(answers[0], {"ok": True, "forwards": []}, label)
        self.assertEqual(answers[1], {"ok": True, "id": 1}, label)
        self.assertEqual([f["spec"] for f in answers[2]["forwards"]],
                         ["18081:8080"], label)
        counters = answers[3]["counters"]
        self.assertEqual(counters["forward_api.refused_peers"], 2, label)
        self.assertEqual(counters["forward_api.connections"], 1, label)
        self.assertEqual(rc, 0, f"{label}: {err}")
        self.assertEqual(err.count("refused a client"), 1,
                         f"{label}: logged once: {err}")
        self.assertIn("inside CMD's PID namespace", err, label)
        # Nothing left.
        left = iu.run("pgrep", "-f", marker, check=False).stdout.split()
        self.assertEqual(left, [], f"{label}: processes left: {left}")
        self.assertFalse(os.path.exists(path), f"{label}: the socket file")
        os.unlink(link)
        os.rmdir(linkdir)
        self.assertEqual(self.topo.links(self.topo.h), links_before, label)
        os.rmdir(apidir)

    def test_cmd_is_refused_as_root(self):
        self.check_cmd_is_refused("root", (), 0)

    def test_cmd_is_refused_as_an_unprivileged_user(self):
        with TunMode():
            self.check_cmd_is_refused("uid 65534", NOBODY, 65534)


if __name__ == "__main__":
    unittest.main(verbosity=2)
