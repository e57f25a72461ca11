"""libnetstack.so.1's ABI: its SONAME, and that it exports the C API of
netstack.h and nothing else (the C++ library and Abseil stay local)."""

import os
import re
import subprocess
import unittest

LIB = os.path.join(os.environ.get("TEST_SRCDIR", ""), "netstack",
                   "netstack/capi/libnetstack.so.1")
HEADER_FUNCTIONS = {
    "netstack_config_init", "netstack_new", "netstack_free",
    "netstack_last_error", "netstack_run", "netstack_stop", "netstack_fd",
    "netstack_next_deadline_ns", "netstack_poll", "netstack_input",
    "netstack_forward_add", "netstack_forward_remove", "netstack_counters",
    "netstack_counter", "netstack_version",
}
# Functions added after 1.0, by the version node of their release.
LATER_FUNCTIONS = {"netstack_set_policy_file": "NETSTACK_1.1"}
NODES = {"NETSTACK_1.0", "NETSTACK_1.1"}


def run(*argv):
    return subprocess.run(argv, check=True, capture_output=True,
                          text=True).stdout


class AbiTest(unittest.TestCase):

    def test_soname(self):
        dyn = run("readelf", "-d", LIB)
        self.assertRegex(dyn, r"\(SONAME\)\s+Library soname: \[libnetstack\.so\.1\]")
        # Nothing of Abseil's or ours is needed from a -dev package's
        # unversioned name.
        for needed in re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dyn):
            self.assertRegex(needed, r"\.so\.\d", needed)

    def test_only_netstack_symbols_are_exported(self):
        # nm -D: every defined dynamic symbol.
        defined = set()
        for line in run("nm", "-D", "--defined-only", LIB).splitlines():
            fields = line.split()
            defined.add(fields[-1])
        self.assertLessEqual(NODES, defined)  # the version nodes themselves
        functions = {s.split("@")[0] for s in defined if s not in NODES}
        stray = {s for s in functions if not s.startswith("netstack_")}
        self.assertEqual(stray, set(), "exported beyond netstack_*")
        self.assertEqual(functions, HEADER_FUNCTIONS | set(LATER_FUNCTIONS))

    def test_objdump_agrees_and_versions(self):
        # objdump -T: defined symbols have a section other than *UND*.
        exported = {}
        for line in run("objdump", "-T", LIB).splitlines():
            m = re.match(r"^[0-9a-f]+ .{7} (\S+)\s+[0-9a-f]+\s+(\S+)\s+(\S+)$",
                         line)
            if m and m.group(1) != "*UND*":
                exported[m.group(3)] = m.group(2)
        for node in NODES:
            exported.pop(node, None)
        self.assertEqual(set(exported), HEADER_FUNCTIONS | set(LATER_FUNCTIONS))
        for name, version in exported.items():
            self.assertEqual(version, LATER_FUNCTIONS.get(name, "NETSTACK_1.0"),
                             name)

    def test_header_declares_what_is_exported(self):
        # A function declared in netstack.h but not exported (or the
        # reverse) would fail at an embedder's link or load.
        header = os.path.join(os.path.dirname(LIB), "netstack.h")
        with open(header) as f:
            declared = set(re.findall(r"NETSTACK_API [^;(]*?\b(netstack_\w+)\(",
                                      f.read()))
        self.assertEqual(declared, HEADER_FUNCTIONS | set(LATER_FUNCTIONS))


if __name__ == "__main__":
    unittest.main()
