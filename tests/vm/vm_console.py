"""The tests/vm guest's serial console, read while QEMU runs: the guest's
init (guest_init.sh) reports each step as an "NST: STEP key=value ..."
line (or "NST: FAIL STEP ..."). Used by tests/vm and tests/slirp."""
import re
import threading
import time


class Console:
    """QEMU's serial console (its stdout): every line with the seconds
    since QEMU started, kept in a file for the failure report."""

    def __init__(self, proc, t0, path):
        self.proc, self.t0, self.path = proc, t0, path
        self.lines = []   # (seconds, text)
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.path, "w") as log:
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip("\r\n")
                t = time.monotonic() - self.t0
                log.write(f"{t:8.3f} {line}\n")
                log.flush()
                with self.cond:
                    self.lines.append((t, line))
                    self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def find(self, what):
        """(seconds, failed, rest) of the first "NST: what ..." or "NST:
        FAIL what ..." line, or None."""
        with self.cond:
            for t, line in self.lines:
                m = re.search(r"NST: (FAIL )?(\w+)(.*)", line)
                if m and m.group(2) == what:
                    return t, bool(m.group(1)), m.group(3)
        return None

    def wait_for(self, what, timeout):
        """find(what), waiting for it; None on timeout or when QEMU
        ended."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.find(what)
            if r is not None:
                return r
            with self.cond:
                left = deadline - time.monotonic()
                if left <= 0 or not self.thread.is_alive():
                    return None
                self.cond.wait(min(left, 0.5))

    def text(self):
        with self.cond:
            return "\n".join(f"{t:8.3f} {l}" for t, l in self.lines)


def fields(rest):
    return dict(re.findall(r"(\w+)=(\S*)", rest))
