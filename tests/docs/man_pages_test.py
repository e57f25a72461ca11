"""The tools' --help and man pages (issue #36 part 2).

--help: the usage lines come first; every flag a tool defines is in
exactly one group of its --help (one in none would show up under "Other
flags", which fails here), each group says when you need it, and no line
is wider than 80 columns.

docs/man/TOOL.1: the usual sections; every flag of --help is in the page
and every flag the page names is in --help; its OPTIONS part is what
`bazel run //tests/docs:update_man_pages` makes from --help today; and it
renders without a warning from groff or man.
"""
import os
import re
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import man_pages  # noqa: E402

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                        os.environ.get("TEST_WORKSPACE", "netstack"))
if not os.environ.get("TEST_SRCDIR"):  # run by hand from the source tree
    RUNFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "..")
BIN = RUNFILES if os.environ.get("TEST_SRCDIR") else os.path.join(
    RUNFILES, "bazel-bin")
# Flags every tool takes from Abseil's flags library.
BUILTIN_FLAGS = {"help", "helpfull", "helpshort", "flagfile", "version"}
NETSTACKD_GROUPS = ["Attaching the guest", "Address plan", "Forwards",
                    "Limits", "Policy", "Sandbox", "Diagnostics",
                    "Host mode"]
SECTIONS = ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS",
            "EXAMPLES", "SEE ALSO"]

_HELP = {}


def binary(tool):
    return os.path.join(BIN, man_pages.TOOLS[tool][0])


def help_of(tool):
    if tool not in _HELP:
        text = man_pages.run_help(binary(tool))
        _HELP[tool] = (text, man_pages.parse_help(text))
    return _HELP[tool]


def man_page(tool):
    with open(os.path.join(RUNFILES, "docs", "man", tool + ".1"),
              encoding="utf-8") as f:
        return f.read()


def norm(name):
    return name.replace("-", "_")


# --- the checks, each a list of problems (tested on bad input below) ------

def grouping_problems(help_, defined):
    """Flags of `defined` in no group or in two; groups that name no flag
    of `defined`; groups without their "when" line; "Other flags"."""
    out = []
    seen = {}
    for s in help_.sections:
        if s.title == "Other flags":
            out.append("an 'Other flags' group: "
                       + ", ".join("--" + f.name for f in s.flags))
        if s.flags and not s.when:
            out.append(f"group '{s.title}' does not say when you need it")
        for f in s.flags:
            n = norm(f.name)
            if n in seen:
                out.append(f"--{f.name} is in '{seen[n]}' and '{s.title}'")
            seen[n] = s.title
            if n not in defined:
                out.append(f"--{f.name} ('{s.title}') is no flag of the tool")
    for n in sorted(defined - set(seen)):
        out.append(f"--{n} is in no group")
    return out


def man_flag_problems(help_, page):
    """Flags of --help not in the page, and flags of the page not in
    --help."""
    in_help = {norm(f.name) for f in man_pages.help_flags(help_)}
    in_page = {norm(n) for n in man_pages.man_flags(page)}
    out = [f"--{n} is in --help, not in the man page"
           for n in sorted(in_help - in_page)]
    out += [f"--{n} is in the man page, not in --help"
            for n in sorted(in_page - in_help - BUILTIN_FLAGS)]
    return out


def render_warnings(path):
    """groff's warnings (all of them, -ww) and man's, as lines."""
    out = []
    g = subprocess.run(["groff", "-ww", "-man", "-z", path],
                       capture_output=True, text=True, timeout=60)
    out += [f"groff: {line}" for line in g.stderr.splitlines()]
    env = dict(os.environ, MANWIDTH="80", LANG="C.UTF-8")
    m = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", path],
                       capture_output=True, text=True, timeout=60, env=env)
    out += [f"man: {line}" for line in m.stderr.splitlines()]
    if m.returncode != 0:
        out.append(f"man: exit {m.returncode}")
    return out


class Help(unittest.TestCase):
    def test_usage_comes_first(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                help_ = help_of(tool)[1]
                self.assertTrue(help_.usage[0].startswith(f"usage: {tool} "),
                                help_.usage[0])

    def test_every_flag_is_in_exactly_one_group(self):
        for tool, (path, flags_dir) in man_pages.TOOLS.items():
            with self.subTest(tool=tool):
                defined = man_pages.helpfull_flags(binary(tool), flags_dir)
                self.assertGreater(len(defined), 1)
                problems = grouping_problems(help_of(tool)[1], defined)
                self.assertEqual(problems, [], "\n".join(problems))

    def test_no_line_is_wider_than_80_columns(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                wide = [line for line in help_of(tool)[0].split("\n")
                        if len(line) > 80]
                self.assertEqual(wide, [])

    def test_netstackd_groups_by_task(self):
        help_ = help_of("netstackd")[1]
        titles = [s.title for s in help_.sections if s.flags]
        self.assertEqual([t for t in titles if t in NETSTACKD_GROUPS],
                         NETSTACKD_GROUPS)
        policy = [s for s in help_.sections if s.title == "Policy"][0]
        self.assertLessEqual({"host-loopback", "outbound-bind",
                              "dns-upstream"},
                             {f.name for f in policy.flags})
        # The exit status comes after the groups.
        self.assertEqual(help_.sections[-1].title, "Exit status")
        # Names with dashes, defaults shown.
        entries = {f.entry: f.default for f in man_pages.help_flags(help_)}
        self.assertEqual(entries["--http-root DIR"], "")
        self.assertEqual(entries["--net CIDR"], "10.0.2.0/24")
        self.assertIn("-t, --tcp-forward SPEC", entries)

    def test_a_flag_in_no_group_fails(self):
        # netstackd's page with --loss taken out of its group, as a flag
        # added to config.cc and not to help.cc would leave it.
        text = help_of("netstackd")[0]
        help_ = man_pages.parse_help(text)
        for s in help_.sections:
            s.flags = [f for f in s.flags if f.name != "loss"]
        defined = man_pages.helpfull_flags(binary("netstackd"),
                                           "tools/netstackd/")
        self.assertEqual(grouping_problems(help_, defined),
                         ["--loss is in no group"])
        help_.sections[0].flags.append(help_.sections[1].flags[0])
        self.assertEqual(len(grouping_problems(help_, defined)), 2)


class ManPages(unittest.TestCase):
    def test_usual_sections(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                heads = re.findall(r'^\.SH "?([^"\n]+)"?$', man_page(tool),
                                   re.M)
                self.assertEqual([h for h in heads if h in SECTIONS],
                                 SECTIONS)

    def test_every_help_flag_is_in_the_page_and_back(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                problems = man_flag_problems(help_of(tool)[1], man_page(tool))
                self.assertEqual(problems, [], "\n".join(problems))

    def test_options_are_made_from_help_today(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                want = man_pages.options_roff(help_of(tool)[1])
                self.assertEqual(
                    man_pages.options_part(man_page(tool)), want,
                    f"docs/man/{tool}.1's OPTIONS are not --help's: run "
                    "`bazel run //tests/docs:update_man_pages`")

    def test_pages_render_without_warnings(self):
        for tool in man_pages.TOOLS:
            with self.subTest(tool=tool):
                path = os.path.join(RUNFILES, "docs", "man", tool + ".1")
                problems = render_warnings(path)
                self.assertEqual(problems, [], "\n".join(problems))

    def test_netstackd_page_explains_the_slirp4netns_mode(self):
        page = man_page("netstackd")
        part = page.split('.SH "SLIRP4NETNS MODE"', 1)
        self.assertEqual(len(part), 2, "no SLIRP4NETNS MODE section")
        self.assertIn("docs/SLIRP4NETNS.md", part[1].split(".SH", 1)[0])
        self.assertIn("netstackd slirp4netns \\-\\-help", part[1])

    def test_a_stale_or_wrong_page_fails(self):
        help_ = help_of("netstackd")[1]
        page = man_page("netstackd")
        bad = page.replace("\\-\\-discard\\-port", "\\-\\-discard\\-prot")
        self.assertEqual(man_flag_problems(help_, bad), [
            "--discard_port is in --help, not in the man page",
            "--discard_prot is in the man page, not in --help"])
        self.assertNotEqual(man_pages.options_part(bad),
                            man_pages.options_roff(help_))

    def test_a_groff_warning_fails(self):
        path = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"),
                            f"bad{os.getpid()}.1")
        try:
            with open(path, "w") as f:
                f.write(man_page("pcap_inspect").replace(
                    ".SH DESCRIPTION", ".SH DESCRIPTION\n.nosuchrequest\n"
                    "\\fBbold never closed", 1))
            problems = render_warnings(path)
        finally:
            os.unlink(path)
        self.assertTrue(any("nosuchrequest" in p for p in problems),
                        problems)


if __name__ == "__main__":
    unittest.main()
