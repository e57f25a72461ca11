"""Code in the docs is code that compiles (issue #31).

A C++ or C block in a doc that shows a compiled example is the example's
text between its two marker lines, dedented: docs/BACKEND.md's embedding
block is netstack/runtime/embed_example.cc's `// [embed]` part. When the
example changes and the doc does not (or the other way round), this fails
and says which.
"""
import os
import textwrap
import unittest

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                    os.environ.get("TEST_WORKSPACE", "netstack"))
if not os.environ.get("TEST_SRCDIR"):  # run by hand from the source tree
    ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

# (doc, the heading the block follows, source file, the marker line).
SYNCED = [
    ("docs/BACKEND.md", "## Embedding", "netstack/runtime/embed_example.cc",
     "// [embed]"),
]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def marked_part(source, marker):
    parts = [p for p in source.split("\n") if p.strip() == marker]
    if len(parts) != 2:
        raise AssertionError(f"{marker!r} must mark the part twice")
    text = source.split(marker + "\n")
    # text[0] ends with the first marker line's indentation.
    return textwrap.dedent(text[1].rsplit("\n", 1)[0] + "\n")


def first_block_after(doc, heading, lang):
    after = doc.split("\n" + heading + "\n", 1)
    if len(after) != 2:
        raise AssertionError(f"no heading {heading!r}")
    fence = "```" + lang + "\n"
    if fence not in after[1]:
        raise AssertionError(f"no ```{lang} block after {heading!r}")
    return after[1].split(fence, 1)[1].split("```\n", 1)[0]


class CodeBlocksSync(unittest.TestCase):
    def test_each_block_is_its_compiled_example(self):
        for doc, heading, source, marker in SYNCED:
            with self.subTest(doc=doc, source=source):
                block = first_block_after(read(doc), heading, "cpp")
                want = marked_part(read(source), marker)
                self.assertEqual(
                    block, want,
                    f"{doc}'s block after {heading!r} is not {source}'s "
                    f"part between its {marker!r} lines")


if __name__ == "__main__":
    unittest.main()
