#!/usr/bin/env python3
"""A TCP echo server for the backend tests, run in H:

  python3 echo_server.py PORT [--log FILE]

It listens on 0.0.0.0:PORT and [::]:PORT (IPV6_V6ONLY, so the two are two
listeners). Per connection, one thread reads and another writes, with a
bounded queue (QUEUE_CHUNKS of up to CHUNK bytes, 4 MiB) between them: the
reader stops reading while the queue is full and the writer never waits
for the reader. After the client's EOF and once everything read has been
written, it half-closes (SHUT_WR) and then closes.

Why not `socat TCP-LISTEN:...,fork PIPE`: socat's PIPE address writes into
a pipe it reads from in the same thread. When the client does not read as
fast as it writes, that write blocks (wchan anon_pipe_write) with socat
unable to drain the pipe or the socket: the echo stops for good. That
stalled a 256 MiB echo under faults at 17.6 MiB; the stack was not at
fault.

With --log, one line per connection when it ends: the peer, bytes read,
bytes written, seconds, and the error that ended it if any.
"""
import queue
import socket
import sys
import threading
import time

CHUNK = 256 << 10
QUEUE_CHUNKS = 16  # 4 MiB in flight inside the server at most


class Connection:
    def __init__(self, sock, peer, log):
        self.sock, self.peer, self.log = sock, peer, log
        self.chunks = queue.Queue(maxsize=QUEUE_CHUNKS)
        self.read = self.written = 0
        self.error = None
        self.start = time.monotonic()

    def reader(self):
        try:
            while True:
                b = self.sock.recv(CHUNK)
                if not b:
                    break
                self.read += len(b)
                self.chunks.put(b)
        except OSError as e:
            self.error = self.error or f"recv: {e}"
        finally:
            self.chunks.put(None)  # EOF (or an error): the writer ends

    def writer(self):
        failed = False
        while True:
            b = self.chunks.get()
            if b is None:
                break
            if failed:
                continue  # drain, so that the reader never blocks on put
            try:
                self.sock.sendall(b)
                self.written += len(b)
            except OSError as e:
                self.error = self.error or f"send: {e}"
                failed = True
                # Wakes a reader blocked in recv.
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        if not failed:
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError as e:
                self.error = self.error or f"shutdown: {e}"

    def run(self):
        t = threading.Thread(target=self.reader, daemon=True)
        t.start()
        self.writer()
        t.join()
        self.sock.close()
        if self.log:
            line = (f"{self.peer} read {self.read} written {self.written} "
                    f"seconds {time.monotonic() - self.start:.2f}"
                    + (f" error {self.error}" if self.error else "") + "\n")
            with open(self.log, "a") as f:
                f.write(line)


def listener(family, addr, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.bind((addr, port))
    s.listen(64)
    return s


def accept_loop(lsock, log):
    while True:
        sock, peer = lsock.accept()
        c = Connection(sock, peer[0] + f" port {peer[1]}", log)
        threading.Thread(target=c.run, daemon=True).start()


def main(argv):
    port = int(argv[1])
    log = argv[3] if len(argv) > 3 and argv[2] == "--log" else None
    listeners = [listener(socket.AF_INET, "0.0.0.0", port),
                 listener(socket.AF_INET6, "::", port)]
    threads = [threading.Thread(target=accept_loop, args=(l, log), daemon=True)
               for l in listeners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main(sys.argv)
