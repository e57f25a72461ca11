"""The guest's servers for port_forward_interop_test, run as netstackd's
CMD: HTTP on [::]:8080 (both families) serving argv[1]'s file, TCP echo
servers bound to 127.0.0.1 only, on 9000 and 9001, and UDP echo servers on
127.0.0.1:9100, [::1]:9100 and [::]:9101. Each accepted client's address is appended
to argv[2] (a UDP client's once, as "udp9100 ADDR"); "ready" goes to
stdout once all listen. SIGTERM ends it with status 0."""
import http.server
import os
import signal
import socket
import socketserver
import sys
import threading

FILE, CLIENTS = sys.argv[1], sys.argv[2]
lock = threading.Lock()


def note(port, addr):
    with lock, open(CLIENTS, "a") as f:
        f.write(f"{port} {addr}\n")


class Http(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        note(8080, self.client_address[0])
        with open(FILE, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class DualStack(socketserver.ThreadingMixIn, http.server.HTTPServer):
    address_family = socket.AF_INET6
    daemon_threads = True

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        note(self.server.server_address[1], self.client_address[0])
        while True:
            b = self.request.recv(65536)
            if not b:
                break
            self.request.sendall(b)
        self.request.shutdown(socket.SHUT_WR)


class EchoServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def udp_echo(family, addr, port):
    """Echoes each datagram; notes each new client address once."""
    s = socket.socket(family, socket.SOCK_DGRAM)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind((addr, port))
    seen = set()

    def serve():
        while True:
            data, peer = s.recvfrom(65536)
            if peer[:2] not in seen:
                seen.add(peer[:2])
                note(f"udp{port}", peer[0])
            s.sendto(data, peer)
    threading.Thread(target=serve, daemon=True).start()


udp_echo(socket.AF_INET, "127.0.0.1", 9100)
udp_echo(socket.AF_INET6, "::1", 9100)
udp_echo(socket.AF_INET6, "::", 9101)  # both families (v6only is off)

servers = [DualStack(("::", 8080), Http),
           EchoServer(("127.0.0.1", 9000), Echo),
           EchoServer(("127.0.0.1", 9001), Echo)]
for s in servers:
    threading.Thread(target=s.serve_forever, daemon=True).start()
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
signal.pause()
