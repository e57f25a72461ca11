"""Both ends of forward_limits_interop_test: idle clients of a -t forward,
and the guest that holds their connections and makes its own.

  guest PORT SERVER SERVER_PORT DIR   (netstackd's CMD)
    Listens on 0.0.0.0:PORT (the spliced path reaches its loopback, the
    stack path its lease) and holds every connection it accepts until
    the client closes it (then closes it too). Prints "ready". When the
    file DIR/go.N appears, it makes 5 connections of its own to
    SERVER:SERVER_PORT (an echo server in H, through netstackd's backend)
    and writes DIR/result.N: {"held": connections held, "outbound": ["ok"
    or the error, per connection]}. SIGTERM ends it.

  clients                              (in H; commands on stdin)
    "open PORT N": N connections to 127.0.0.1:PORT, kept idle.
    "state PORT": {"open": n, "reset": n, "closed": n} of PORT's
      connections (reset: the forward refused it with a RST; closed: FIN).
    "close PORT K": closes K of PORT's open connections.
    Each command answers one JSON line. EOF ends it.
"""
import json
import os
import resource
import selectors
import signal
import socket
import sys
import threading
import time


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def guest(port, server, server_port, directory):
    raise_fd_limit()
    sel = selectors.DefaultSelector()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("0.0.0.0", port))
    listener.listen(4096)
    listener.setblocking(False)
    sel.register(listener, selectors.EVENT_READ)
    held = set()
    lock = threading.Lock()

    def serve():
        while True:
            for key, _ in sel.select():
                s = key.fileobj
                if s is listener:
                    try:
                        c, _ = listener.accept()
                    except OSError:
                        continue
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                    with lock:
                        held.add(c)
                    continue
                try:
                    data = s.recv(65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(s)
                    with lock:
                        held.discard(s)
                    s.close()

    def outbound():
        try:
            with socket.create_connection((server, server_port),
                                          timeout=5) as s:
                s.sendall(b"hello")
                got = b""
                while len(got) < 5:
                    b = s.recv(5 - len(got))
                    if not b:
                        break
                    got += b
                return "ok" if got == b"hello" else f"echo {got!r}"
        except OSError as e:
            return repr(e)

    threading.Thread(target=serve, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("ready", flush=True)
    n = 0
    while True:
        go = os.path.join(directory, f"go.{n}")
        if not os.path.exists(go):
            time.sleep(0.05)
            continue
        results = [outbound() for _ in range(5)]
        with lock:
            count = len(held)
        tmp = os.path.join(directory, f".result.{n}")
        with open(tmp, "w") as f:
            json.dump({"held": count, "outbound": results}, f)
        os.rename(tmp, os.path.join(directory, f"result.{n}"))
        n += 1


def probe(s):
    """"open", "reset" (a RST came) or "closed" (a FIN came)."""
    try:
        data = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        return "open" if data else "closed"
    except BlockingIOError:
        return "open"
    except ConnectionResetError:
        return "reset"
    except OSError:
        return "closed"


def clients():
    raise_fd_limit()
    groups = {}
    ended = {}  # socket -> "reset" or "closed": a RST is reported once
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        port = int(cmd[1])
        conns = groups.setdefault(port, [])
        for s in conns:
            if s not in ended:
                state = probe(s)
                if state != "open":
                    ended[s] = state
        if cmd[0] == "open":
            errors = []
            for _ in range(int(cmd[2])):
                s = socket.socket()
                s.settimeout(5)
                try:
                    s.connect(("127.0.0.1", port))
                except ConnectionResetError:
                    # Made, then reset before connect() looked (a forward
                    # past its limit resets at once): SO_ERROR reports it.
                    conns.append(s)
                    ended[s] = "reset"
                    continue
                except OSError as e:
                    errors.append(repr(e))
                    s.close()
                    continue
                # probe() must not wait: a socket with a timeout polls
                # for it before a recv, MSG_DONTWAIT or not.
                s.setblocking(False)
                conns.append(s)
            answer = {"opened": len(conns), "errors": errors[:3]}
        elif cmd[0] == "state":
            answer = {"open": 0, "reset": 0, "closed": 0}
            for s in conns:
                answer[ended.get(s, "open")] += 1
        elif cmd[0] == "close":
            closing = [s for s in conns if s not in ended][:int(cmd[2])]
            for s in closing:
                s.close()
                conns.remove(s)
            answer = {"closed": len(closing)}
        else:
            answer = {"error": f"unknown command {cmd[0]!r}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "guest":
        guest(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5])
    elif sys.argv[1] == "clients":
        clients()
    else:
        sys.exit(f"usage: {sys.argv[0]} guest PORT SERVER SERVER_PORT DIR | "
                 "clients")
