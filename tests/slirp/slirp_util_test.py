#!/usr/bin/env python3
"""slirp_util's proof of which libslirp a process loaded must be able to
say no: a process that loaded Debian's libslirp is not taken for one that
loaded a copy of it (same bytes, another file), a process with no libslirp
is refused, and LD_LIBRARY_PATH from Libslirp.env() really changes what
the loader maps. The "client" is python itself loading libslirp.so.0 with
ctypes (the same search as a program's DT_NEEDED). Needs libslirp0; no
root, no namespaces."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from tests.slirp import slirp_util as su

LOADER = """
import ctypes, sys, time
ctypes.CDLL("libslirp.so.0")
print("loaded", flush=True)
time.sleep(60)
"""


class LibslirpIdentityTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        try:
            cls.system = su.system_libslirp()
        except RuntimeError as e:
            raise unittest.SkipTest(str(e))
        cls.tmp = tempfile.mkdtemp(prefix="nst-libslirp-test-")
        cls.copy_dir = os.path.join(cls.tmp, "copy")
        os.makedirs(cls.copy_dir)
        shutil.copy(cls.system, os.path.join(cls.copy_dir, su.SONAME))
        # The same library under a name other than the SONAME (as a Bazel
        # target may name its output).
        cls.odd_file = os.path.join(cls.tmp, "libslirp_so.so")
        shutil.copy(cls.system, cls.odd_file)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def loader(self, lib):
        p = subprocess.Popen([sys.executable, "-c", LOADER],
                             stdout=subprocess.PIPE, env=lib.env())
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        self.assertEqual(p.stdout.readline().strip(), b"loaded")
        return p

    def test_system_library_is_the_baseline(self):
        lib = su.Libslirp("")
        self.assertIsNone(lib.dir)
        self.assertEqual(lib.path, os.path.realpath(self.system))
        p = self.loader(lib)
        self.assertEqual(lib.assert_loaded(p.pid), lib.path)
        # A copy of the same bytes is another library: refused.
        copy = su.Libslirp(self.copy_dir)
        with self.assertRaisesRegex(AssertionError, "not netstack"):
            copy.assert_loaded(p.pid)

    def test_directory_under_test_is_what_gets_loaded(self):
        copy = su.Libslirp(self.copy_dir)
        self.assertEqual(copy.dir, self.copy_dir)
        self.assertTrue(copy.env()["LD_LIBRARY_PATH"].startswith(
            self.copy_dir + ":") or copy.env()["LD_LIBRARY_PATH"] ==
            self.copy_dir)
        p = self.loader(copy)
        self.assertEqual(copy.assert_loaded(p.pid),
                         os.path.join(self.copy_dir, su.SONAME))
        with self.assertRaisesRegex(AssertionError, "not debian"):
            su.Libslirp("").assert_loaded(p.pid)

    def test_a_file_of_another_name(self):
        lib = su.Libslirp(self.odd_file)
        self.addCleanup(lib.close)
        self.assertEqual(lib.path, self.odd_file)
        p = self.loader(lib)
        lib.assert_loaded(p.pid)

    def test_baseline_drops_an_inherited_libslirp_path(self):
        env = dict(os.environ, LD_LIBRARY_PATH=self.copy_dir)
        self.assertNotIn("LD_LIBRARY_PATH", su.Libslirp("").env(env))

    def test_a_process_without_libslirp_is_refused(self):
        p = subprocess.Popen([sys.executable, "-c",
                              "import time; print(1, flush=True); "
                              "time.sleep(60)"], stdout=subprocess.PIPE)
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        p.stdout.readline()
        with self.assertRaisesRegex(AssertionError, "maps no libslirp"):
            su.Libslirp("").assert_loaded(p.pid)

    def test_a_missing_library_is_an_error(self):
        with self.assertRaisesRegex(RuntimeError, "no libslirp.so.0"):
            su.Libslirp(self.tmp)

    def test_find_process_below_a_wrapper(self):
        p = subprocess.Popen(["sh", "-c", "sleep 30; :"])
        self.addCleanup(p.wait)
        self.addCleanup(p.kill)
        pid = su.find_process(p.pid, "sleep", timeout=5)
        self.assertIsNotNone(pid)
        self.assertNotEqual(pid, p.pid)
        os.kill(pid, 9)



class NothingLeftTest(unittest.TestCase):
    """assert_nothing_left says no to each kind of leftover."""

    class Procs:
        def __init__(self, left):
            self.left = left

        def leftovers(self):
            return self.left

    class Namespaces:
        def __init__(self, left):
            self.left = left

        def leftover_namespaces(self):
            return self.left

    def test_clean_passes(self):
        gone = tempfile.mktemp(prefix="nst-left-")
        su.assert_nothing_left(self.Procs([]), self.Namespaces([]), gone)

    def test_each_leftover_is_refused(self):
        gone = tempfile.mktemp(prefix="nst-left-")
        with self.assertRaisesRegex(AssertionError, "processes left"):
            su.assert_nothing_left(self.Procs([123]), self.Namespaces([]),
                                   gone)
        with self.assertRaisesRegex(AssertionError, "namespaces left"):
            su.assert_nothing_left(self.Procs([]), self.Namespaces(["nsx"]),
                                   gone)
        kept = tempfile.mkdtemp(prefix="nst-left-")
        try:
            with self.assertRaisesRegex(AssertionError, "is left"):
                su.assert_nothing_left(self.Procs([]), self.Namespaces([]),
                                       kept)
        finally:
            os.rmdir(kept)


if __name__ == "__main__":
    unittest.main()
