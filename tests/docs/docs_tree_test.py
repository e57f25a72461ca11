"""The docs say where things are (issue #36 part 4).

- docs/ARCHITECTURE.md's folder tree (the ```text block under "The layers,
  as folders") names only directories that exist, and names every Bazel
  package of the repository (a directory with a BUILD.bazel that git
  tracks), so a new package cannot land without its line.
- Every relative Markdown link in README.md, docs/ and docs/journal/ leads
  to a file that exists and, when it has a #fragment, to a heading of that
  file (GitHub's anchors): a section that moves or is renamed breaks no
  link to it.

It reads the source tree, which the runfiles lead to (the test runs
local), and is tagged external: it reads files no target declares.
"""
import os
import re
import subprocess
import unittest

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                        os.environ.get("TEST_WORKSPACE", "netstack"))
if not os.environ.get("TEST_SRCDIR"):  # run by hand from the source tree
    RUNFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "..")


def source_root():
    root = os.path.dirname(os.path.realpath(os.path.join(RUNFILES,
                                                         "README.md")))
    assert os.path.exists(os.path.join(root, "WORKSPACE")), root
    return root


# --- the folder tree -------------------------------------------------------

_ENTRY = re.compile(r"^( *)([\w.+-]+(?:/[\w.+-]+)*)/(?:\s|$)")


def tree_block(text):
    """The lines of the ```text block after the heading "The layers, as
    folders"."""
    head = text.index("## The layers, as folders")
    start = text.index("```text\n", head) + len("```text\n")
    end = text.index("```", start)
    return text[start:end].split("\n")


def tree_dirs(lines):
    """The directories a tree names, as repository paths. An entry is a line
    whose first word ends with "/", indented as deep as an entry above it or
    two columns deeper than the last one (its child); its parent is the
    nearest entry above it that is indented less. Other lines continue a
    description."""
    stack = []  # [(indent, path)]
    dirs = []
    for line in lines:
        m = _ENTRY.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        if indent > (stack[-1][0] + 2 if stack else 0):
            continue  # a description's next line
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (stack[-1][1] + "/" if stack else "") + m.group(2)
        stack.append((indent, path))
        dirs.append(path)
    return dirs


def packages(root):
    """Every directory with a BUILD.bazel that git tracks (the root
    excepted)."""
    out = subprocess.run(["git", "-C", root, "ls-files", "--", "BUILD.bazel",
                          "*/BUILD.bazel"], capture_output=True, text=True,
                         check=True).stdout.split()
    return sorted({os.path.dirname(p) for p in out} - {""})


def tree_problems(text, root, pkgs):
    dirs = tree_dirs(tree_block(text))
    problems = [f"the tree names {d}/, which does not exist"
                for d in dirs if not os.path.isdir(os.path.join(root, d))]
    named = set(dirs)
    problems += [f"the tree does not name {p}/ (it has a BUILD.bazel)"
                 for p in pkgs if p not in named]
    return problems


class ArchitectureTree(unittest.TestCase):
    def setUp(self):
        self.root = source_root()
        with open(os.path.join(self.root, "docs", "ARCHITECTURE.md")) as f:
            self.text = f.read()

    def test_the_tree_matches_the_repository(self):
        problems = tree_problems(self.text, self.root, packages(self.root))
        self.assertEqual(problems, [], "\n".join(problems))

    def test_nesting_makes_paths(self):
        lines = ["netstack/", "  tcp/        TCP: see tools/ and the",
                 "              rest/ of it", "tools/  the tools",
                 "  dev/      scripts"]
        self.assertEqual(tree_dirs(lines),
                         ["netstack", "netstack/tcp", "tools", "tools/dev"])

    def test_a_missing_package_and_a_stale_line_are_named(self):
        text = ("## The layers, as folders\n\n```text\nnetstack/\n"
                "  tcp/   TCP\n  gone/  removed long ago\n```\n")
        problems = tree_problems(text, self.root,
                                 ["netstack/tcp", "netstack/udp"])
        self.assertEqual(problems, [
            "the tree names netstack/gone/, which does not exist",
            "the tree does not name netstack/udp/ (it has a BUILD.bazel)"])


# --- links -------------------------------------------------------------------

def without_code(text):
    """The text with fenced blocks and inline code blanked (lines kept)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            out.append("")
            continue
        if m:
            fence = m.group(1)
            out.append("")
            continue
        out.append(re.sub(r"`[^`]*`", "``", line))
    return out


def anchors(text):
    """GitHub's anchors for a Markdown text's headings: lower case, spaces
    to hyphens, punctuation dropped, repeats numbered -1, -2, ..."""
    seen, out = {}, set()
    for line in without_code_keep_headings(text):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        if slug in seen:
            seen[slug] += 1
            out.add(f"{slug}-{seen[slug]}")
        else:
            seen[slug] = 0
            out.add(slug)
    return out


def without_code_keep_headings(text):
    """Lines outside fenced blocks, inline code kept (a heading's backticks
    are dropped from its anchor, their text is not)."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^\s*(```+|~~~+)", line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        out.append(line)
    return out


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def link_problems(files):
    """files: {repository path: text}. Every relative link resolves."""
    problems = []
    cache = {}
    for path, text in sorted(files.items()):
        for n, line in enumerate(without_code(text), 1):
            for target in _LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                file_part, _, frag = target.partition("#")
                dest = (os.path.normpath(os.path.join(os.path.dirname(path),
                                                      file_part))
                        if file_part else path)
                if dest not in files and not os.path.exists(
                        os.path.join(source_root(), dest)):
                    problems.append(f"{path}:{n}: {target}: no {dest}")
                    continue
                if not frag:
                    continue
                if dest not in cache:
                    if dest in files:
                        cache[dest] = anchors(files[dest])
                    else:
                        with open(os.path.join(source_root(), dest)) as f:
                            cache[dest] = anchors(f.read())
                if frag not in cache[dest]:
                    problems.append(f"{path}:{n}: {target}: {dest} has no "
                                    f"heading #{frag}")
    return problems


def markdown_files(root):
    paths = ["README.md"]
    for d in ("docs", os.path.join("docs", "journal")):
        full = os.path.join(root, d)
        if os.path.isdir(full):
            paths += sorted(os.path.join(d, f) for f in os.listdir(full)
                            if f.endswith(".md"))
    files = {}
    for p in paths:
        with open(os.path.join(root, p)) as f:
            files[p] = f.read()
    return files


class Links(unittest.TestCase):
    def test_every_relative_link_resolves(self):
        files = markdown_files(source_root())
        self.assertIn("docs/BENCHMARKS.md", files)
        problems = link_problems(files)
        self.assertEqual(problems, [], "\n".join(problems))

    def test_anchors_follow_github(self):
        text = ("# Benchmarks\n## Splice relay: `//bench:splice_benchmark`\n"
                "## The issue's goals\n### The issue's goals\n"
                "```sh\n# not a heading\n```\n## A VM guest: netstackd --unix\n")
        self.assertEqual(anchors(text), {
            "benchmarks", "splice-relay-benchsplice_benchmark",
            "the-issues-goals", "the-issues-goals-1",
            "a-vm-guest-netstackd---unix"})

    def test_a_broken_anchor_and_a_missing_file_are_named(self):
        files = {"docs/A.md": "# A\n## Here\n",
                 "docs/B.md": "see [a](A.md#here), [b](A.md#gone) and\n"
                              "[c](C.md), `[d](D.md)` in code\n"}
        self.assertEqual(link_problems(files), [
            "docs/B.md:1: A.md#gone: docs/A.md has no heading #gone",
            "docs/B.md:2: C.md: no docs/C.md"])


if __name__ == "__main__":
    unittest.main()
