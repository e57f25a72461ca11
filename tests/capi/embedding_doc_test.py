"""docs/EMBEDDING.md's C block is netstack/capi/example.c's part between
its two `// [example]` lines: the example the interop test compiles and
runs is the one the doc shows. Fails, saying which, when one changes and
the other does not."""
import os
import unittest

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                    os.environ.get("TEST_WORKSPACE", "netstack"))
if not os.environ.get("TEST_SRCDIR"):  # run by hand from the source tree
    ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

MARKER = "// [example]\n"


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


class EmbeddingDocTest(unittest.TestCase):
    def test_doc_block_is_the_example(self):
        source = read("netstack/capi/example.c")
        parts = source.split(MARKER)
        self.assertEqual(len(parts), 3, "example.c needs two [example] lines")
        doc = read("docs/EMBEDDING.md")
        after = doc.split("\n## The example\n", 1)
        self.assertEqual(len(after), 2, "no '## The example' heading")
        self.assertIn("```c\n", after[1])
        block = after[1].split("```c\n", 1)[1].split("```\n", 1)[0]
        self.assertEqual(block, parts[1],
                         "docs/EMBEDDING.md's C block is not example.c's "
                         "part between its [example] lines")


if __name__ == "__main__":
    unittest.main()
