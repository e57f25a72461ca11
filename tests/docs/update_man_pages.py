"""Rewrites the OPTIONS part of docs/man/TOOL.1 from TOOL --help.

  bazel run //tests/docs:update_man_pages

The rest of each page is written by hand; //tests/docs:man_pages_test
fails until this has run after a flag or its help changed.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import man_pages  # noqa: E402


def main():
    tree = os.environ.get("BUILD_WORKSPACE_DIRECTORY")
    if not tree:
        sys.exit("update_man_pages: run it with `bazel run`")
    # This file is RUNFILES/netstack/tests/docs/update_man_pages.py.
    runfiles = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                            "..", "..")
    changed = 0
    for tool, (binary, _) in man_pages.TOOLS.items():
        help_ = man_pages.parse_help(
            man_pages.run_help(os.path.join(runfiles, binary)))
        path = os.path.join(tree, "docs", "man", tool + ".1")
        with open(path, encoding="utf-8") as f:
            page = f.read()
        new = man_pages.with_options(page, man_pages.options_roff(help_))
        if new != page:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)
            changed += 1
            print(f"updated {os.path.relpath(path, tree)}")
    print(f"{changed} of {len(man_pages.TOOLS)} pages updated")


if __name__ == "__main__":
    main()
