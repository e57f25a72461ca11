"""The servers the policy tests reach, run in H: one process, a thread per
listener.

  TCP on every address of both families (one dual-stack socket per port):
    HTTP_PORTS  a one-line HTTP answer naming the address it was reached
                on ("ok 198.51.100.10"), so a test sees which server
                answered;
    PLAIN_PORTS accept and hold (the DoT and DoH stand-ins: only the
                connect matters);
    STREAM_PORT endless data, 64 KiB writes, until the peer goes.
  UDP on each address given (bound one by one so that an answer leaves
  from the address the datagram came to, as a connected host socket
  needs): UDP_PORTS echo each datagram back.

argv: the UDP addresses. Prints "ready" once everything listens.
"""
import socket
import sys
import threading

HTTP_PORTS = (80, 8080, 8081)
PLAIN_PORTS = (443, 853)
STREAM_PORT = 9000
UDP_PORTS = (443, 7000)


def listener(port):
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", port))
    s.listen(1024)
    return s


def local_ip(conn):
    ip = conn.getsockname()[0]
    return ip[7:] if ip.startswith("::ffff:") else ip


def http(conn):
    try:
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                return
            data += chunk
        body = f"ok {local_ip(conn)}\n".encode()
        conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n"
                     b"Connection: close\r\n\r\n" % len(body) + body)
    except OSError:
        pass
    finally:
        conn.close()


def hold(conn):
    try:
        conn.settimeout(30)
        while conn.recv(4096):
            pass
    except OSError:
        pass
    finally:
        conn.close()


def stream(conn):
    chunk = b"x" * 65536
    try:
        while True:
            conn.sendall(chunk)
    except OSError:
        pass
    finally:
        conn.close()


def serve_tcp(port, handler):
    s = listener(port)
    def loop():
        while True:
            conn, _ = s.accept()
            threading.Thread(target=handler, args=(conn,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def serve_udp(addr, port):
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((addr, port))
    def loop():
        while True:
            data, peer = s.recvfrom(65535)
            s.sendto(data, peer)
    threading.Thread(target=loop, daemon=True).start()


def main():
    for port in HTTP_PORTS:
        serve_tcp(port, http)
    for port in PLAIN_PORTS:
        serve_tcp(port, hold)
    serve_tcp(STREAM_PORT, stream)
    for addr in sys.argv[1:]:
        for port in UDP_PORTS:
            serve_udp(addr, port)
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
