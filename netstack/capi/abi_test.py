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
        self.assertIn("NETSTACK_1.0", defined)  # the version node itself
        functions = {s.split("@")[0] for s in defined if s != "NETSTACK_1.0"}
        stray = {s for s in functions if not s.startswith("netstack_")}
        self.assertEqual(stray, set(), "exported beyond netstack_*")
        self.assertEqual(functions, HEADER_FUNCTIONS)

    def test_objdump_agrees_and_versions(self):
        # objdump -T: defined symbols have a section other than *UND*.
        exported = {}
        for line in run("objdump", "-T", LIB).splitlines():
            m = re.match(r"^[0-9a-f]+ .{7} (\S+)\s+[0-9a-f]+\s+(\S+)\s+(\S+)$",
                         line)
            if m and m.group(1) != "*UND*":
                exported[m.group(3)] = m.group(2)
        exported.pop("NETSTACK_1.0", None)
        self.assertEqual(set(exported), HEADER_FUNCTIONS)
        for name, version in exported.items():
            self.assertEqual(version, "NETSTACK_1.0", name)


if __name__ == "__main__":
    unittest.main()
