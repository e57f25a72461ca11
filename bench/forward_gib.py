#!/usr/bin/env python3
"""1 GiB each way through netstackd's port forwards (-t), checked by sha256.

  netstackd [--forward-path=stack] -t 127.0.0.1/15001:5001
      -t [::1]/15002:5001 -t unix:PATH:5001 -- forward_gib.py --role guest

runs in H (BackendTopology: only lo and a veth into an empty sink
namespace, no default route; asserted before netstackd starts). The guest
(CMD) listens on [::]:5001, dual-stack. For each path (spliced, the
default; --forward-path=stack) and each forward (IPv4 127.0.0.1, IPv6 ::1,
unix:PATH), a client in H moves SIZE bytes host->guest (PUT) and then
guest->host (GET). The sender makes the bytes on the fly (a 1 MiB seeded
random block, each block stamped with its index) and hashes what it sends;
the receiver hashes what it gets; both sha256s must equal the one this
script computed from the generator before starting. Nothing holds more
than 1 MiB.

For each transfer: the time (connect to the peer's last word), the
throughput, netstackd's CPU, and the forward's counters read before and
after it (SIGUSR1): bytes to and from the guest, spliced bytes, and on the
stack path the backend's TCP bytes. On the spliced path every byte must be
spliced; through the stack none. The stack path for an IPv6 client goes to
the guest's IPv4 lease (the client appears as the gateway): known, see
docs/SANDBOX.md.

Both ends hash (Python's hashlib, about 1 GB/s per core here) and share the
two cores with netstackd: the figures are end-to-end with verification, a
floor for the relay, not its ceiling.

Needs root and netstackd (an --config=opt build:
bazel build --config=opt //tools/netstackd).

Usage: bench/forward_gib.py [--netstackd PATH] [--size 1G]
                            [--paths splice,stack] [--forwards v4,v6,unix]
                            [--directions put,get]
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))

BLOCK = 1 << 20
SEED = 14  # issue #14
GUEST_PORT = 5001
READY = "forward_gib: guest ready"


# -- the byte stream -------------------------------------------------------

def base_block():
    return random.Random(SEED).randbytes(BLOCK)


def blocks(size, base):
    """The stream as (stamp, view) pairs: block i is i's 8-byte stamp and
    the rest of the base block, the last one cut short."""
    view = memoryview(base)
    i = 0
    left = size
    while left > 0:
        stamp = i.to_bytes(8, "big")[:left]
        rest = view[8:min(BLOCK, left)]
        yield stamp, rest
        left -= len(stamp) + len(rest)
        i += 1


def expected_sha(size):
    h = hashlib.sha256()
    for stamp, rest in blocks(size, base_block()):
        h.update(stamp)
        h.update(rest)
    return h.hexdigest()


def send_stream(sock, size):
    h = hashlib.sha256()
    for stamp, rest in blocks(size, base_block()):
        h.update(stamp)
        h.update(rest)
        sock.sendall(stamp)
        sock.sendall(rest)
    return h.hexdigest()


def recv_stream(sock, size):
    """Exactly `size` bytes, hashed; raises on an early EOF."""
    h = hashlib.sha256()
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    left = size
    while left:
        n = sock.recv_into(view, min(BLOCK, left))
        if n == 0:
            raise EOFError(f"EOF with {left} of {size} bytes to come")
        h.update(view[:n])
        left -= n
    return h.hexdigest()


def recv_line(sock):
    out = bytearray()
    while not out.endswith(b"\n"):
        b = sock.recv(1)
        if not b:
            break
        out += b
    return out.decode().strip()


# -- the guest (CMD) --------------------------------------------------------

def serve(conn):
    """PUT N: read N bytes, answer "SHA N". GET N: send N bytes, then
    "SHA N", then close."""
    with conn:
        try:
            verb, n = recv_line(conn).split()
            n = int(n)
            if verb == "PUT":
                sha = recv_stream(conn, n)
                conn.sendall(f"{sha} {n}\n".encode())
                recv_line(conn)  # the client's close
            elif verb == "GET":
                sha = send_stream(conn, n)
                conn.sendall(f"{sha} {n}\n".encode())
                conn.shutdown(socket.SHUT_WR)
                recv_line(conn)
        except (OSError, EOFError, ValueError) as e:
            print(f"forward_gib guest: {e}", file=sys.stderr, flush=True)


def guest(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", port))
    s.listen(16)
    print(READY, file=sys.stderr, flush=True)
    while True:
        conn, _ = s.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


# -- the client (in H) ------------------------------------------------------

def client(target, direction, size):
    """One transfer; prints a JSON line."""
    kind, _, where = target.partition(":")
    t0 = time.monotonic()
    if kind == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(120)
        sock.connect(where)
    else:
        host, _, port = where.rpartition(":")
        sock = socket.create_connection((host.strip("[]"), int(port)),
                                        timeout=120)
    with sock:
        if direction == "put":
            sock.sendall(f"PUT {size}\n".encode())
            mine = send_stream(sock, size)
            peer, n = recv_line(sock).split()
        else:
            sock.sendall(f"GET {size}\n".encode())
            mine = recv_stream(sock, size)
            peer, n = recv_line(sock).split()
        seconds = time.monotonic() - t0
    print(json.dumps({"sha": mine, "peer_sha": peer, "peer_bytes": int(n),
                      "seconds": seconds}))


# -- the run ----------------------------------------------------------------

def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_size(text):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text[-1].upper() in mult:
        return int(float(text[:-1]) * mult[text[-1].upper()])
    return int(text)


FORWARDS = {  # name: (forward number, client target)
    "v4": (1, "tcp:127.0.0.1:15001"),
    "v6": (2, "tcp:[::1]:15002"),
    "unix": (3, None),  # unix:PATH, made per run
}
KEYS = ("accepted", "failed", "bytes_to_guest", "bytes_from_guest",
        "spliced_bytes")
BACKEND_KEYS = ("backend.tcp_bytes_host_to_guest",
                "backend.tcp_bytes_guest_to_host")


def counters_now(nd, i):
    c = nd.counters()
    out = {k: c.get(f"forward.{i}.{k}", 0) for k in KEYS}
    out["active"] = c.get(f"forward.{i}.active", 0)
    for k in BACKEND_KEYS:
        out[k] = c.get(k, 0)
    return out


def run_path(topo, iu, path, forwards, directions, size, want_sha, tmp):
    sock = os.path.join(tmp, f"fwd-{path}.sock")
    flags = ["--forward-path=stack"] if path == "stack" else []
    nd = iu.Netstackd([], name=f"forward-gib-{path}")
    nd.args = topo.sandbox_args(
        "--verbose", *flags, "-t", "127.0.0.1/15001:5001",
        "-t", "[::1]/15002:5001", "-t", f"unix:{sock}:{GUEST_PORT}", "--",
        sys.executable, os.path.abspath(__file__), "--role", "guest")
    rows = []
    try:
        nd.start()
        if not iu.wait_for(lambda: READY in nd.log(), 15):
            raise SystemExit(f"the guest did not start: {nd.log()}")
        for fwd in forwards:
            i, target = FORWARDS[fwd]
            if fwd == "unix":
                target = f"unix:{sock}"
            for direction in directions:
                before = counters_now(nd, i)
                cpu0 = cpu_seconds(nd.proc.pid)
                p = subprocess.run(topo.in_ns(
                    topo.h, sys.executable, os.path.abspath(__file__),
                    "--role", "client", "--target", target,
                    "--direction", direction, "--size", str(size)),
                    capture_output=True, text=True, timeout=600)
                cpu1 = cpu_seconds(nd.proc.pid)
                if p.returncode != 0:
                    raise SystemExit(f"{path} {fwd} {direction}: client "
                                     f"failed: {p.stderr}\n{nd.log()[-3000:]}")
                r = json.loads(p.stdout)
                # The relay is done when the guest's side closed too.
                iu.wait_for(lambda: counters_now(nd, i)["active"] == 0, 10)
                after = counters_now(nd, i)
                d = {k: after[k] - before[k] for k in (*KEYS, *BACKEND_KEYS)}
                d["active_after"] = after["active"]
                ok = (r["sha"] == r["peer_sha"] == want_sha and
                      r["peer_bytes"] == size)
                if path == "stack":
                    counters_ok = d["spliced_bytes"] == 0
                else:
                    counters_ok = (d["spliced_bytes"] == d["bytes_to_guest"] +
                                   d["bytes_from_guest"] and
                                   d[("bytes_to_guest" if direction == "put"
                                      else "bytes_from_guest")] >= size)
                rows.append(dict(path=path, forward=fwd, direction=direction,
                                 seconds=r["seconds"], sha_ok=ok,
                                 counters_ok=counters_ok,
                                 cpu=(cpu1 - cpu0), counters=d))
                print_row(rows[-1], size)
    finally:
        nd.stop()
        log = nd.log()
        nd.close()
    return rows, log


def print_row(r, size):
    mbs = size / r["seconds"] / 1e6
    d = r["counters"]
    extra = ""
    if r["path"] == "stack":
        extra = (f" backend h->g {d['backend.tcp_bytes_host_to_guest']}"
                 f" g->h {d['backend.tcp_bytes_guest_to_host']}")
    print(f"{r['path']:6s} {r['forward']:4s} {r['direction']:3s} "
          f"{r['seconds']:7.2f} s {mbs:7.0f} MB/s "
          f"sha256 {'ok' if r['sha_ok'] else 'MISMATCH'} "
          f"netstackd cpu {r['cpu']:.2f} s "
          f"to_guest {d['bytes_to_guest']} from_guest {d['bytes_from_guest']} "
          f"spliced {d['spliced_bytes']} "
          f"{'counters ok' if r['counters_ok'] else 'COUNTERS WRONG'}{extra}",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=("run", "guest", "client"),
                    default="run")
    ap.add_argument("--netstackd", default=os.path.join(
        HERE, "..", "bazel-out", "k8-optopt", "bin", "tools", "netstackd",
        "netstackd"))
    ap.add_argument("--size", default="1G")
    ap.add_argument("--paths", default="splice,stack")
    ap.add_argument("--forwards", default="v4,v6,unix")
    ap.add_argument("--directions", default="put,get")
    ap.add_argument("--target")
    ap.add_argument("--direction", choices=("put", "get"))
    a = ap.parse_args()
    size = parse_size(a.size)
    if a.role == "guest":
        return guest(GUEST_PORT)
    if a.role == "client":
        return client(a.target, a.direction, size)

    from tests.backend.backend_topology import BackendTopology
    from tests.interop import interop_util as iu
    if os.geteuid() != 0:
        sys.exit("forward_gib: needs root")
    if not os.path.exists(a.netstackd):
        sys.exit(f"forward_gib: no netstackd at {a.netstackd}; build it with "
                 "bazel build --config=opt //tools/netstackd")
    iu.NETSTACKD = os.path.abspath(a.netstackd)
    t0 = time.monotonic()
    want = expected_sha(size)
    print(f"{size} bytes, sha256 {want} ({time.monotonic() - t0:.2f} s to "
          "compute)", flush=True)
    topo = BackendTopology()
    tmp = tempfile.mkdtemp(prefix="nst-gib-")
    rows = []
    try:
        topo.setup()
        for path in a.paths.split(","):
            got, log = run_path(topo, iu, path, a.forwards.split(","),
                                a.directions.split(","), size, want, tmp)
            rows += got
            exit_c = iu.parse_counters(log.split("counters (exit):\n")[-1])
            print(f"{path}: netstackd at exit: " + " ".join(
                f"{k}={v}" for k, v in sorted(exit_c.items())
                if k.startswith("forward.") or k.startswith(
                    "backend.tcp_inbound")), flush=True)
    finally:
        topo.close()
        shutil.rmtree(tmp, ignore_errors=True)
    bad = [r for r in rows if not (r["sha_ok"] and r["counters_ok"])]
    print(f"{len(rows) - len(bad)} of {len(rows)} transfers ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
