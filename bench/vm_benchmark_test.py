#!/usr/bin/env python3
"""vm_benchmark.py's summary: medians over the rounds and the table's
ratios against netstackd's stream path. No root, no VM."""
import unittest

from bench import vm_benchmark as vb


def run(lease, dl, ul, cpu, tso="on"):
    return {"boot_to_lease": lease, "link_to_lease": lease / 10,
            "download_mbps": dl, "upload_mbps": ul, "cpu_s_per_gb": cpu,
            "tso": tso}


class SummaryTest(unittest.TestCase):
    def test_medians_and_ratios(self):
        runs = {
            "vhost-user": [run(3.0, 60, 150, 1.0), run(3.2, 40, 140, 3.0),
                           run(3.1, 50, 160, 2.0)],
            "stream": [run(4.0, 40, 40, 4.0, "off"),
                       run(4.0, 50, 50, 4.0, "off")],
            "passt": [],
        }
        med = vb.medians(runs)
        self.assertEqual(med["vhost-user"]["download_mbps"], 50)
        self.assertEqual(med["vhost-user"]["cpu_s_per_gb"], 2.0)
        self.assertEqual(med["stream"]["download_mbps"], 45)
        self.assertEqual(med["passt"]["runs"], 0)
        self.assertIsNone(med["passt"]["download_mbps"])
        text = vb.table(med)
        lines = text.splitlines()
        self.assertIn("netstackd vhost-user", lines[0])
        # The ratio row under the CPU row: 2.0 / 4.0 for vhost-user.
        cpu = next(i for i, l in enumerate(lines)
                   if l.startswith("| backend CPU s per GB"))
        cells = [c.strip() for c in lines[cpu + 1].split("|")[1:-1]]
        self.assertEqual(cells, ["x netstackd stream", "0.50", "1.00", "-"])
        self.assertIn("| guest TSO (ethtool -k)", text)


if __name__ == "__main__":
    unittest.main()
