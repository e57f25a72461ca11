"""nginx as a real server and ab (apache2-utils) as a real client, for the
backend's interop tests and benchmarks (seed 004's nginx/ab run).

  site = NginxSite(tmpdir, size=10 << 20)  # a file, an nginx.conf
  server = site.start(prefix)              # prefix runs nginx somewhere:
                                           # ["ip", "netns", "exec", NS] or
                                           # netstackd ... --
  server.wait_listening()                  # port 80 in nginx's namespace
  r, text = ab(client_prefix, url, n=100, c=5)  # ab's figures, parsed
  rc = server.stop()                       # the prefix's exit status

A benchmark under bench/ imports it as bench/backend_iperf3.py imports
BackendTopology (the repository root on sys.path). ab 2.4 sometimes opens
one spare connection as it finishes and sends nothing on it: count
connections as "at least n, fewer than n + c".

The nginx.conf is minimal and self-contained: daemon off, one worker,
sendfile on, the pid file and both logs in the site's directory, `listen 80`
on IPv4 and IPv6 (ipv6only, nginx's default for [::]), the file as
/file. Nothing here starts a network namespace or checks isolation: the
caller does (BackendTopology).
"""
import os
import re
import resource
import signal
import subprocess
import time

NGINX = "/usr/sbin/nginx"
AB = "/usr/bin/ab"

CONF = """\
daemon off;
master_process on;
worker_processes 1;
# The worker as root too: the site may live under a directory only root
# can enter (Bazel's TEST_TMPDIR under /root). A master that is not root
# ignores this, with a warning.
user root root;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
    worker_connections 256;
}}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    default_type application/octet-stream;
    sendfile on;
    keepalive_timeout 30;
    server {{
        listen {port};
        listen [::]:{port};
        root {root};
    }}
}}
"""


def have_tools():
    """The reason nginx/ab cannot run here, or None."""
    for tool in (NGINX, AB):
        if not os.access(tool, os.X_OK):
            return f"needs {tool} (tools/dev/install-deps: nginx-light, " \
                   "apache2-utils)"
    return None


class NginxSite:
    """A directory holding nginx.conf, the served file (`size` bytes of
    random data at /file) and nginx's pid file and logs. `dir` must
    exist."""

    def __init__(self, dir, size=10 << 20, port=80, name="file"):
        self.dir, self.size, self.port, self.name = dir, size, port, name
        self.root = os.path.join(dir, "www")
        os.makedirs(self.root, exist_ok=True)
        self.file = os.path.join(self.root, name)
        with open(self.file, "wb") as f:
            left = size
            while left:
                n = min(left, 1 << 20)
                f.write(os.urandom(n))
                left -= n
        self.conf = os.path.join(dir, "nginx.conf")
        with open(self.conf, "w") as f:
            f.write(CONF.format(dir=dir, port=port, root=self.root))
        self.pid_file = os.path.join(dir, "nginx.pid")
        self.error_log = os.path.join(dir, "error.log")

    def command(self):
        """nginx's own command line (-e: errors before the config is read
        go to the site's log too, not /var/log/nginx)."""
        return [NGINX, "-p", self.dir, "-c", self.conf, "-e", self.error_log]

    def start(self, prefix=(), stderr=None):
        """nginx under `prefix` (a command that execs its arguments in the
        namespace to serve from). `stderr`: a file for the prefix's own
        messages (netstackd's counters), else discarded."""
        if os.path.exists(self.pid_file):
            os.unlink(self.pid_file)
        proc = subprocess.Popen([*prefix, *self.command()],
                                stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL,
                                stderr=stderr or subprocess.DEVNULL)
        return NginxServer(self, proc)


class NginxServer:
    def __init__(self, site, proc):
        self.site, self.proc = site, proc

    def descendants(self):
        """The runner's pid and those of everything under it still alive."""
        out, todo = [], [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                for task in os.listdir(f"/proc/{pid}/task"):
                    with open(f"/proc/{pid}/task/{task}/children") as f:
                        todo += [int(c) for c in f.read().split()]
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
            out.append(pid)
        return out

    def nginx_pid(self):
        """nginx's master, as this namespace numbers it. The pid file holds
        the number in nginx's own PID namespace: under `netstackd -- CMD`
        that is CMD's (2, say), not ours, so the master is the process
        under the runner whose innermost NSpid is the file's."""
        try:
            with open(self.site.pid_file) as f:
                inner = int(f.read().strip() or 0)
        except (FileNotFoundError, ValueError):
            return None
        if inner <= 0:
            return None
        for pid in self.descendants():
            try:
                with open(f"/proc/{pid}/status") as f:
                    for line in f:
                        if line.startswith("NSpid:"):
                            if int(line.split()[-1]) == inner:
                                return pid
                            break
            except (FileNotFoundError, ProcessLookupError, ValueError):
                continue
        return None

    def listening(self):
        """Whether nginx's master listens on the site's port on both
        families, read from its own namespace's /proc/PID/net/tcp{,6}."""
        pid = self.nginx_pid()
        if pid is None:
            return False
        port = f":{self.site.port:04X}"
        listen = "0A"  # TCP_LISTEN in the table's "st" column
        try:
            for table in ("tcp", "tcp6"):
                with open(f"/proc/{pid}/net/{table}") as f:
                    rows = [r.split() for r in f.read().splitlines()[1:]]
                if not any(r[1].endswith(port) and r[3] == listen
                           for r in rows):
                    return False
        except (FileNotFoundError, ProcessLookupError):
            return False
        return True

    def wait_listening(self, timeout=15):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"nginx's runner exited {self.proc.returncode}: "
                    f"{self.error_log()}")
            if self.listening():
                return
            time.sleep(0.05)
        raise AssertionError(f"nginx did not listen: {self.error_log()}")

    def error_log(self):
        try:
            with open(self.site.error_log) as f:
                return f.read()[-2000:]
        except FileNotFoundError:
            return "(no error log)"

    def cpu_seconds(self):
        """{command name: CPU seconds (user + system)} of the runner and
        everything under it that is still alive (netstackd, nginx's master
        and worker), all threads. Take it before and after a run: the
        difference is what the server side spent on it."""
        out = {}
        for pid in self.descendants():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    stat = f.read()
            except (FileNotFoundError, ProcessLookupError):
                continue
            comm = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            ticks = int(fields[11]) + int(fields[12])  # utime, stime
            out[comm] = out.get(comm, 0) + ticks / os.sysconf("SC_CLK_TCK")
        return out

    def stop(self, timeout=20):
        """SIGTERM to the runner (netstackd passes it on to nginx; `ip
        netns exec` is nginx itself): nginx's fast shutdown. Returns the
        runner's status. Safe to call twice."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        # A worker left behind (it should not be) would hold the port.
        pid = self.nginx_pid()
        if pid is not None:
            try:
                os.kill(pid, 0)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return self.proc.returncode


_AB_FIELDS = {
    "complete": (r"^Complete requests:\s+(\d+)", int),
    "failed": (r"^Failed requests:\s+(\d+)", int),
    "non_2xx": (r"^Non-2xx responses:\s+(\d+)", int),
    "document_length": (r"^Document Length:\s+(\d+) bytes", int),
    "total_transferred": (r"^Total transferred:\s+(\d+) bytes", int),
    "html_transferred": (r"^HTML transferred:\s+(\d+) bytes", int),
    "seconds": (r"^Time taken for tests:\s+([\d.]+) seconds", float),
    "requests_per_second": (r"^Requests per second:\s+([\d.]+)", float),
    "kbytes_per_second": (r"^Transfer rate:\s+([\d.]+) \[Kbytes/sec\]", float),
}


def parse_ab(text):
    """ab's report as a dict (fields of _AB_FIELDS that it printed;
    "non_2xx" is 0 when ab printed no such line). mb_per_second is the
    transfer rate in 10^6 bytes/s (ab's Kbytes are 1024 bytes)."""
    out = {}
    for key, (pattern, kind) in _AB_FIELDS.items():
        m = re.search(pattern, text, re.M)
        if m:
            out[key] = kind(m.group(1))
    out.setdefault("non_2xx", 0)
    if "kbytes_per_second" in out:
        out["mb_per_second"] = out["kbytes_per_second"] * 1024 / 1e6
    return out


def ab(prefix, url, n=100, c=5, timeout=120):
    """`ab -n N -c C URL` under `prefix` (the client's namespace); returns
    (parsed figures, ab's whole output). ab's own -s (30 s) bounds each
    request; `timeout` bounds the run. "client_cpu" is the CPU seconds ab
    used (the prefix must exec ab, as `ip netns exec` does)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([*prefix, AB, "-n", str(n), "-c", str(c), "-s", "30",
                        url], capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    text = p.stdout + p.stderr
    r = parse_ab(p.stdout)
    r["returncode"] = p.returncode
    r["client_cpu"] = (after.ru_utime - before.ru_utime +
                       after.ru_stime - before.ru_stime)
    return r, text
