#!/usr/bin/env python3
"""Kernel-side client for the interop tests, run inside the peer namespace
(`ip netns exec NS python3 peer_client.py ...`). The sockets are the Linux
kernel's; this script only drives them. Prints one JSON object.

  udp-echo ADDR PORT --sizes 1,1472,8000 --count N
      sends each datagram (deterministic bytes) and waits for its echo;
      reports how many came back identical, changed, or not at all.
  udp-send ADDR PORT --sizes ... --count N
      sends the datagrams (discard), no answer expected.
  http-pipeline ADDR PORT PATH...
      sends one GET per path in a single write (the last with
      "Connection: close"), reads until EOF and parses every response:
      status, headers and the sha256 of each body, in order.
  http-raw ADDR PORT --request-file F
      sends the bytes of F, reads until EOF (or 10 s), reports the status
      line and whether the server closed the connection.
"""
import argparse
import hashlib
import json
import socket
import sys
import time


def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def payload(i, size):
    seed = hashlib.sha256(f"{i}:{size}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def udp_echo(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    s = socket.socket(family_of(args.addr), socket.SOCK_DGRAM)
    s.settimeout(args.timeout)
    s.connect((args.addr, args.port))
    same = changed = lost = 0
    for i in range(args.count):
        size = sizes[i % len(sizes)]
        data = payload(i, size)
        s.send(data)
        deadline = time.time() + args.timeout
        while True:
            try:
                s.settimeout(max(0.01, deadline - time.time()))
                got = s.recv(70000)
            except socket.timeout:
                lost += 1
                break
            if got == data:
                same += 1
                break
            # A late echo of an earlier (timed out) datagram: keep waiting.
            if any(got == payload(j, sizes[j % len(sizes)]) for j in range(i)):
                continue
            changed += 1
            break
    return {"sent": args.count, "same": same, "changed": changed,
            "lost": lost}


def udp_send(args):
    sizes = [int(s) for s in args.sizes.split(",")]
    s = socket.socket(family_of(args.addr), socket.SOCK_DGRAM)
    s.connect((args.addr, args.port))
    total = 0
    for i in range(args.count):
        data = payload(i, sizes[i % len(sizes)])
        s.send(data)
        total += len(data)
        time.sleep(0.001)  # stay within the receive queue
    return {"sent": args.count, "bytes": total}


def read_all(s, timeout):
    s.settimeout(timeout)
    chunks = []
    closed = False
    try:
        while True:
            b = s.recv(1 << 20)
            if not b:
                closed = True
                break
            chunks.append(b)
    except socket.timeout:
        pass
    except ConnectionResetError:
        closed = True
    return b"".join(chunks), closed


def parse_responses(data):
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            out.append({"error": "incomplete head", "bytes": len(data)})
            break
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        body, data = rest[:n], rest[n:]
        out.append({"status": lines[0], "headers": headers,
                    "length": len(body),
                    "sha256": hashlib.sha256(body).hexdigest()})
    return out


def http_pipeline(args):
    s = socket.create_connection((args.addr, args.port), timeout=10)
    reqs = []
    for i, path in enumerate(args.paths):
        last = i == len(args.paths) - 1
        reqs.append(f"GET {path} HTTP/1.1\r\nHost: {args.addr}\r\n"
                    + ("Connection: close\r\n" if last else "") + "\r\n")
    s.sendall("".join(reqs).encode())
    data, closed = read_all(s, args.timeout)
    return {"responses": parse_responses(data), "closed": closed}


def http_raw(args):
    with open(args.request_file, "rb") as f:
        req = f.read()
    s = socket.create_connection((args.addr, args.port), timeout=10)
    try:
        s.sendall(req)
    except (BrokenPipeError, ConnectionResetError):
        pass
    data, closed = read_all(s, args.timeout)
    status = data.split(b"\r\n", 1)[0].decode("latin-1") if data else ""
    return {"status": status, "closed": closed, "bytes": len(data)}


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("udp-echo", "udp-send"):
        q = sub.add_parser(name)
        q.add_argument("addr")
        q.add_argument("port", type=int)
        q.add_argument("--sizes", default="1,100,1472")
        q.add_argument("--count", type=int, default=100)
        q.add_argument("--timeout", type=float, default=2.0)
    q = sub.add_parser("http-pipeline")
    q.add_argument("addr")
    q.add_argument("port", type=int)
    q.add_argument("paths", nargs="+")
    q.add_argument("--timeout", type=float, default=30.0)
    q = sub.add_parser("http-raw")
    q.add_argument("addr")
    q.add_argument("port", type=int)
    q.add_argument("--request-file", required=True)
    q.add_argument("--timeout", type=float, default=10.0)
    args = p.parse_args()
    fn = {"udp-echo": udp_echo, "udp-send": udp_send,
          "http-pipeline": http_pipeline, "http-raw": http_raw}[args.cmd]
    json.dump(fn(args), sys.stdout)
    print()


if __name__ == "__main__":
    main()
