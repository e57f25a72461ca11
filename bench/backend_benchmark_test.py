"""bench/backend_benchmark's arithmetic, without namespaces: the median of
rounds, the better peer, the ratios and the goals' verdicts, the table and
--from-json. The measurements themselves need root and the peers; this
checks what turns them into the table and the goals."""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "backend_benchmark")


def load():
    loader = importlib.machinery.SourceFileLoader("backend_benchmark", SCRIPT)
    spec = importlib.util.spec_from_loader("backend_benchmark", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


bb = load()
M = bb.Measurement


def gbps(v):
    return M(v, "Gbit/s")


def rr(v):
    return M(v, "trans/s", mean_us=1e6 / v, p99_us=1.0)


def req(v):
    return M(v, "req/s", mb_per_second=v * 10.48576)


class Median(unittest.TestCase):
    def test_median_of_rounds_skips_failures(self):
        m = bb.median_measurement([gbps(3), M(error="x"), gbps(1), gbps(2)])
        self.assertEqual(m.value, 2)
        self.assertEqual(m.extra["rounds"], [3, 1, 2])
        self.assertEqual(m.extra["failed_rounds"], 1)

    def test_every_round_failed_is_an_error(self):
        self.assertEqual(bb.median_measurement([M(error="a"),
                                                M(error="b")]).error, "b")

    def test_rate_mean_follows_the_median(self):
        m = bb.median_measurement([rr(1000), rr(3000)])
        self.assertEqual(m.value, 2000)
        self.assertAlmostEqual(m.extra["mean_us"], 500)


class Goals(unittest.TestCase):
    def results(self, nd, pasta, slirp, veth):
        out = {}
        for tool, values in (("netstackd", nd), ("pasta", pasta),
                             ("slirp4netns", slirp), ("veth", veth)):
            for name, v in values.items():
                out[(tool, name)] = v
        return out

    def test_better_peer_is_the_higher_of_the_two(self):
        r = self.results({"rr": rr(100)}, {"rr": rr(50)}, {"rr": rr(80)}, {})
        self.assertEqual(bb.best_peer(r, "rr").value, 80)
        self.assertAlmostEqual(bb.ratio(r[("netstackd", "rr")],
                                        bb.best_peer(r, "rr")), 1.25)

    def test_a_failed_peer_is_not_the_better_one(self):
        r = self.results({}, {"rr": M(error="stalled")}, {"rr": rr(80)}, {})
        self.assertEqual(bb.best_peer(r, "rr").value, 80)

    def test_verdicts(self):
        g = {"tcp-g2h-65520": (gbps(15), gbps(10), gbps(4), gbps(30)),  # 1.5x
             "tcp-h2g-65520": (gbps(10), gbps(8), gbps(6), gbps(30)),   # 1.25x
             "tcp-g2h-1500": (gbps(15), gbps(1), gbps(4), gbps(30)),    # 3.75x, 50%
             "tcp-h2g-1500": (gbps(14), gbps(1), gbps(5), gbps(30)),    # 2.8x, 47%
             "rr": (rr(100), rr(100), rr(90), rr(300)),
             "crr": (rr(99), rr(100), rr(90), rr(300)),
             "nginx": (req(95), req(60), req(20), req(100))}      # 0.95x veth
        r = self.results(*[{k: v[i] for k, v in g.items()} for i in range(4)])
        r[("netstackd", "nginx-stack")] = req(39)  # 1.95x slirp4netns
        verdicts = [ok for _, ok in bb.goals(r, {"netstackd": 0.05})]
        self.assertEqual(verdicts, [True, False, True, True, False, False,
                                    True, False, True, False, True])
        self.assertEqual([ok for _, ok in bb.goals({}, {})], [None] * 11)

    def test_nginx_stack_is_against_slirp4netns_not_the_better_peer(self):
        r = self.results({"nginx-stack": req(41)}, {"nginx": req(100)},
                         {"nginx": req(20)}, {})
        text, ok = bb.goals(r, {})[-2]
        self.assertIn("2.05x", text)
        self.assertTrue(ok)
        r[("netstackd", "nginx-stack")] = M(error="Failed requests: 3")
        self.assertIsNone(bb.goals(r, {})[-2][1])

    def test_slow_start_misses(self):
        self.assertEqual(bb.goals({}, {"netstackd": 0.1})[-1][1], False)


class Ab(unittest.TestCase):
    GOOD = {"returncode": 0, "complete": 100, "failed": 0, "non_2xx": 0,
            "document_length": 10 << 20, "requests_per_second": 80.5,
            "mb_per_second": 844.1, "seconds": 1.242}

    def test_a_whole_run_is_a_figure(self):
        m = bb.ab_measurement(dict(self.GOOD), "", 10 << 20)
        self.assertIsNone(m.error)
        self.assertEqual((m.value, m.unit), (80.5, "req/s"))
        self.assertEqual(bb.fmt(m), "80.5 (844 MB/s)")

    def test_failed_or_missing_requests_are_an_error(self):
        for change, word in (({"failed": 2}, "Failed requests: 2"),
                             ({"complete": 97}, "Complete requests: 97"),
                             ({"non_2xx": 100}, "Non-2xx"),
                             ({"document_length": 5}, "Document Length: 5"),
                             ({"returncode": 1}, "ab exited 1")):
            m = bb.ab_measurement(dict(self.GOOD, **change),
                                  "a\nb\nlast line", 10 << 20)
            self.assertIn(word, m.error)
            # ab's last lines only when it failed as a program.
            self.assertEqual("last line" in m.error, "returncode" in change)
            self.assertEqual(bb.fmt(m), "error")

    def test_ab_that_printed_nothing_is_an_error(self):
        m = bb.ab_measurement({"returncode": 22, "non_2xx": 0},
                              "apr_socket_recv: Connection refused (111)",
                              10 << 20)
        self.assertIn("Connection refused", m.error)


class Table(unittest.TestCase):
    def test_nginx_stack_is_netstackd_only_with_ratios_to_nginx(self):
        r = {("veth", "nginx"): req(100), ("netstackd", "nginx"): req(90),
             ("pasta", "nginx"): req(30), ("slirp4netns", "nginx"): req(20),
             ("netstackd", "nginx-stack"): req(45)}
        ws = [w for w in bb.WORKLOADS if w[0].startswith("nginx")]
        lines = bb.table(r, ws, bb.TOOLS).splitlines()
        self.assertIn("| 90.0 (944 MB/s) | 30.0 (315 MB/s) |", lines[2])
        self.assertIn("| 3.00x        | 0.90x   |", lines[2])
        self.assertIn("| n/a               | 45.0 (472 MB/s) | n/a ", lines[3])
        self.assertIn("| 1.50x        | 0.45x   |", lines[3])


class FromJson(unittest.TestCase):
    def test_table_and_goals_from_an_earlier_run(self):
        run = {"versions": {}, "duration": 2, "repeat": 3,
               "results": {"netstackd/rr": {"value": 200, "unit": "trans/s",
                                            "mean_us": 5000.0},
                           "pasta/rr": {"value": 100, "unit": "trans/s",
                                        "mean_us": 10000.0},
                           "slirp4netns/rr": {"value": None, "unit": "",
                                              "error": "boom"}},
               "startup_seconds": {"netstackd": 0.04}}
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(run, f)
            f.flush()
            out = subprocess.run([sys.executable, SCRIPT, "--from-json",
                                  f.name, "--plot", ""], capture_output=True,
                                 text=True, check=True).stdout
        self.assertIn("| TCP_RR   | 200 (5000 us) | 100 (10000 us) | error"
                      "       | 2.00x        | -       |", out)
        self.assertIn("MET    rr: no worse than the better peer (got 2.00x",
                      out)
        self.assertIn("MET    netstackd -- true under 100 ms (median 40 ms)",
                      out)


if __name__ == "__main__":
    unittest.main()
