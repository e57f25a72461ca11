"""The backend tests' topology: the Linux kernel as the guest, a namespace
as the host.

  G (the guest kernel) --TAP-- netstackd --backend (runs in H) -- host sockets in H
  H ("the host"): lo and one veth end, whose peer lies in a sink namespace S
  with nothing else. H's servers listen on its veth addresses and on its
  loopback. H has no default route: nothing can leave the machine, and an
  address outside H's networks is unroutable there.

netstackd() asserts that before it starts netstackd. Namespace names carry
the test's pid; close() removes them and kills what spawn() started, also
after a failure. tcp_echo_server() starts echo_server.py in H; stalled()
gathers what a stuck transfer leaves to look at. Needs root.
"""
import os
import subprocess
import sys

from tests.interop import interop_util as iu

H4, H6 = "198.51.100.1", "2001:db8:1::1"
G4, G6 = "10.0.2.100", "fd00::100"
ECHO_SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "echo_server.py")


class BackendTopology:
    def __init__(self):
        tag = str(os.getpid())
        self.h = f"nstbe-{tag}-h"
        self.s = f"nstbe-{tag}-s"
        self.g = f"nstbe-{tag}-g"
        self.namespaces = []
        self.procs = []

    def add_ns(self, name):
        iu.run("ip", "netns", "add", name)
        self.namespaces.append(name)
        iu.run("ip", "-n", name, "link", "set", "lo", "up")

    def setup(self):
        self.setup_host()
        self.add_ns(self.g)
        # multi_queue: netstackd --backend reads it with --tap-queues
        # (tap_endpoint.h), as it makes the sandbox's tap0.
        iu.run("ip", "-n", self.g, "tuntap", "add", "dev", "nsttap", "mode",
               "tap", "multi_queue")

    def setup_host(self):
        """H and S, joined by a veth; H's addresses on it."""
        for ns in (self.h, self.s):
            self.add_ns(ns)
        iu.run("ip", "link", "add", "hveth", "netns", self.h, "type", "veth",
               "peer", "name", "sveth", "netns", self.s)
        iu.run("ip", "-n", self.h, "addr", "add", f"{H4}/24", "dev", "hveth")
        iu.run("ip", "-n", self.h, "addr", "add", f"{H6}/64", "dev", "hveth",
               "nodad")
        iu.run("ip", "-n", self.h, "link", "set", "hveth", "up")
        iu.run("ip", "-n", self.s, "link", "set", "sveth", "up")

    def configure_guest(self):
        g = ["ip", "-n", self.g]
        iu.run(*g, "addr", "add", "10.0.2.100/24", "dev", "nsttap")
        iu.run(*g, "addr", "add", "fd00::100/64", "dev", "nsttap", "nodad")
        iu.run(*g, "link", "set", "nsttap", "up")
        iu.run(*g, "route", "add", "default", "via", "10.0.2.2")
        # fd00::2 must be resolvable first: wait for the link-local DAD.
        iu.wait_for(lambda: iu.run(*g, "-6", "route", "add", "default", "via",
                                   "fd00::2", check=False).returncode == 0, 5)

    def links(self, ns):
        out = iu.run("ip", "-n", ns, "-o", "link", "show").stdout
        return sorted(l.split(":")[1].strip().split("@")[0]
                      for l in out.splitlines())

    def in_ns(self, ns, *cmd):
        return ["ip", "netns", "exec", ns, *cmd]

    def spawn(self, ns, *cmd):
        p = subprocess.Popen(self.in_ns(ns, *cmd), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def tcp_echo_server(self, port, log=None):
        """echo_server.py in H on 0.0.0.0:port and [::]:port (a thread
        each way per connection, so it never blocks on itself as socat's
        PIPE does); returns once both listen. `log` gets a line per
        connection."""
        p = self.spawn(self.h, sys.executable, ECHO_SERVER, str(port),
                       *(["--log", log] if log else []))
        want = (f"0.0.0.0:{port} ", f"[::]:{port} ")
        ok = iu.wait_for(lambda: p.poll() is not None or all(
            w in iu.run(*self.in_ns(self.h, "ss", "-ltnH")).stdout
            for w in want), 10)
        assert ok and p.poll() is None, f"echo server on {port} did not start"
        return p

    def stalled(self, nd, pcap, label, port, echo_log=None):
        """What a stuck transfer leaves to look at: netstackd's counters
        and connections (SIGUSR1, and the pcap's tail if there is one),
        both kernels' view of the connection (ss), and where every thread
        of the servers and of socat and curl waits (wchan:
        sk_stream_wait_memory is a blocking write, sk_wait_data a blocking
        read, pipe_read/anon_pipe_write a pipe)."""
        parts = [iu.diagnose(nd, pcap, label, port)]
        for ns in (self.g, self.h):
            parts.append(f"ss in {ns}:\n" + iu.run(*self.in_ns(
                ns, "ss", "-tnmieo", f"( sport = :{port} or dport = :{port} )"),
                check=False).stdout)
        pids = [str(p.pid) for p in self.procs if p.poll() is None]
        pids += iu.run("ps", "-C", "socat,curl", "-o", "pid=",
                       check=False).stdout.split()
        if pids:
            parts.append(iu.run("ps", "-L", "-o", "pid,tid,stat,wchan:32,args",
                                "-p", ",".join(pids), check=False).stdout)
        if echo_log and os.path.exists(echo_log):
            with open(echo_log) as f:
                parts.append("echo server's finished connections:\n"
                             + f.read())
        return "\n".join(parts)

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in reversed(self.namespaces):
            iu.run("ip", "netns", "del", ns, check=False)

    def assert_isolated(self):
        """Nothing may leave the machine: H holds only lo and its veth end,
        whose peer is alone in the sink namespace; H has no default route.
        Raises AssertionError otherwise."""
        links_h, links_s = self.links(self.h), self.links(self.s)
        assert links_h == ["hveth", "lo"], f"H has links {links_h}"
        assert links_s == ["lo", "sveth"], f"S has links {links_s}"
        for family in ("-4", "-6"):
            routes = iu.run("ip", "-n", self.h, family, "route", "show",
                            "default").stdout.strip()
            assert routes == "", f"H has a default route: {routes}"

    def netstackd(self, *extra, dns_upstream="127.0.0.1", wrap=()):
        """netstackd --backend in H on G's TAP, started after the isolation
        check. `wrap` is a command that execs its arguments (prlimit,
        setpriv), to start netstackd with other limits or capabilities.
        The caller closes it (nd.close())."""
        self.assert_isolated()
        nd = iu.Netstackd([])
        nd.args = self.in_ns(self.h, *wrap, iu.NETSTACKD, "--backend", "--tap",
                             "nsttap", "--netns", self.g,
                             # H has no route to resolv.conf's servers.
                             "--dns-upstream", dns_upstream, *extra)
        nd.start()
        return nd

    def sandbox_args(self, *args, dns_upstream="127.0.0.1", wrap=(),
                     runas="0"):
        """The command line of `netstackd [args]` run in H, where `args`
        holds the runner's own flags and "-- CMD ..." (the sandbox runner:
        netstackd makes the guest's namespace itself). Asserts the
        isolation first, as netstackd() does.

        `runas`: as root (no `wrap` that changes the user), netstackd runs
        CMD as nobody unless
        told otherwise; most tests' CMDs are this test's own scripts and
        interpreter, in runfiles under /root, so they run CMD as root's
        uid (--runas 0). None: netstackd's default (the sandbox tests)."""
        self.assert_isolated()
        # A wrap that changes the user (setpriv --reuid) makes netstackd
        # unprivileged, where --runas does not apply; others (prlimit)
        # leave it root.
        as_root = not any(str(w).startswith("--reuid") for w in wrap)
        extra = (("--runas", runas)
                 if runas is not None and as_root and "--" in args else ())
        return self.in_ns(self.h, *wrap, iu.NETSTACKD,
                          "--dns-upstream", dns_upstream, *extra, *args)

