"""Our libslirp.so.0 against Debian's, as the dynamic loader sees them.

QEMU 7.2 is linked BIND_NOW and imports each slirp_* symbol at a version
node (SLIRP_4.0 ... SLIRP_4.7); glibc refuses to load a versioned library
that lacks a node a program asks for. So every symbol Debian's libslirp
exports must be exported by ours at the same node, every node must be
defined, the SONAME must match, and nothing but slirp_* may leak out.

Usage: slirp_abi_test.py PATH_TO_OUR_LIBSLIRP [unittest args]
"""
import os
import re
import subprocess
import sys
import unittest

DEBIAN = "/usr/lib/x86_64-linux-gnu/libslirp.so.0"
OURS = None  # set from argv


def _run(*argv):
    return subprocess.run(argv, check=True, capture_output=True,
                          text=True).stdout


def dynamic_symbols(path):
    """{name: version node} of the defined dynamic symbols (objdump -T),
    without the node markers themselves (the *ABS* entries)."""
    out = {}
    for line in _run("objdump", "-T", path).splitlines():
        # 000000000000c230 g    DF .text  00000000000004d7  SLIRP_4.1   slirp_new
        m = re.match(r"^[0-9a-f]+ (.{7}) (\S+)\s+[0-9a-f]+\s+(\(?[\w.@]+\)?)"
                     r"\s+(\S+)$", line)
        if not m:
            continue
        flags, section, version, name = m.groups()
        if section in ("*UND*", "*ABS*"):
            continue
        out[name] = version.strip("()")
    return out


def version_definitions(path):
    """The names of the version nodes the library defines (readelf -V's
    .gnu.version_d), without the file's own name entry."""
    out = _run("readelf", "-V", path)
    section = out.split("Version definition section", 1)
    if len(section) < 2:
        return set()
    body = section[1].split("Version needs section", 1)[0]
    names = set()
    for m in re.finditer(r"Flags: (\S+).*?Name: (\S+)", body):
        flags, name = m.groups()
        if flags != "BASE":
            names.add(name)
    return names


def soname(path):
    m = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]",
                  _run("readelf", "-d", path))
    return m.group(1) if m else None


@unittest.skipUnless(os.path.exists(DEBIAN), "Debian's libslirp0 absent")
class AbiTest(unittest.TestCase):

    def test_every_debian_symbol_at_its_node(self):
        theirs = dynamic_symbols(DEBIAN)
        ours = dynamic_symbols(OURS)
        self.assertEqual(len(theirs), 23, theirs)
        missing = {n: v for n, v in theirs.items() if n not in ours}
        self.assertEqual(missing, {}, "symbols Debian's libslirp has and "
                         "ours lacks")
        moved = {n: (v, ours[n]) for n, v in theirs.items()
                 if n in ours and ours[n] != v}
        self.assertEqual(moved, {}, "symbols at another node (Debian's, "
                         "ours)")

    def test_nothing_but_slirp_exported(self):
        extra = sorted(n for n in dynamic_symbols(OURS)
                       if not n.startswith("slirp_"))
        self.assertEqual(extra, [])

    def test_version_nodes(self):
        theirs = version_definitions(DEBIAN)
        self.assertTrue({"SLIRP_4.0", "SLIRP_4.1", "SLIRP_4.2", "SLIRP_4.5",
                         "SLIRP_4.7"} <= theirs, theirs)
        self.assertEqual(version_definitions(OURS), theirs)

    def test_soname(self):
        self.assertEqual(soname(DEBIAN), "libslirp.so.0")
        self.assertEqual(soname(OURS), "libslirp.so.0")
        self.assertEqual(os.path.basename(OURS), "libslirp.so.0")


if __name__ == "__main__":
    OURS = os.path.abspath(sys.argv.pop(1))
    unittest.main()
