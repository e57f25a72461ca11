"""The tools' --help, read back, and the man pages' OPTIONS made from it.

A tool's --help (tools/common/cli.h, FormatHelp) is: the usage lines, the
description's paragraphs, then sections. A section starts at column 0
with its title and a colon, then on the same line (wrapped at column 0)
when you need it; its flags follow, each an entry line indented 2
("  --net CIDR (default: 10.0.2.0/24)") and its help text indented 6.
Blank lines separate the blocks; a paragraph has no indented line.

docs/man/TOOL.1 holds the OPTIONS section made from that, between the
lines BEGIN and END below; `bazel run //tests/docs:update_man_pages`
rewrites it, and tests/docs/man_pages_test.py checks it is up to date.
"""
import dataclasses
import re
import subprocess

# Each tool: its binary (a runfiles path) and where its flags are defined.
TOOLS = {
    "netstackd": ("tools/netstackd/netstackd", "tools/netstackd/"),
    "tcp_benchmark": ("tools/tcp_benchmark/tcp_benchmark",
                      "tools/tcp_benchmark/"),
    "splice_proxy": ("tools/splice_proxy/splice_proxy",
                     "tools/splice_proxy/"),
    "pcap_inspect": ("tools/pcap_inspect/pcap_inspect",
                     "tools/pcap_inspect/"),
}

BEGIN = ('.\\" BEGIN OPTIONS, made from --help by '
         '`bazel run //tests/docs:update_man_pages`: do not edit.')
END = '.\\" END OPTIONS'

_ENTRY = re.compile(r"^  (-\S.*?)(?: \(default: (.*)\))?$")
_TITLE = re.compile(r"^([^:]+):(?: (.*))?$")


@dataclasses.dataclass
class Flag:
    entry: str      # "--http-root DIR", "-t, --tcp-forward SPEC"
    default: str    # "" when none is shown
    help: str

    @property
    def name(self):
        """The long name as shown: "http-root" (or "fault_queue_limit")."""
        return re.search(r"--([\w-]+)", self.entry).group(1)


@dataclasses.dataclass
class Section:
    title: str
    when: str
    flags: list


@dataclasses.dataclass
class Help:
    usage: list         # lines
    description: list   # paragraphs, each one line
    sections: list      # Section, flag groups and others (exit status)


def run_help(binary):
    p = subprocess.run([binary, "--help"], capture_output=True, text=True,
                       timeout=30)
    if p.returncode != 0:
        raise AssertionError(f"{binary} --help: exit {p.returncode}: "
                             f"{p.stderr}")
    return p.stdout


def parse_help(text):
    blocks = [b.split("\n") for b in re.split(r"\n\s*\n", text.strip("\n"))]
    out = Help(usage=blocks[0], description=[], sections=[])
    for lines in blocks[1:]:
        # The heading: the lines at column 0, "Title: when you need it".
        n = 0
        while n < len(lines) and not lines[n].startswith(" "):
            n += 1
        m = _TITLE.match(" ".join(lines[:n]))
        if not m or n == len(lines):  # a paragraph: nothing indented
            if not out.sections:
                out.description.append(" ".join(lines))
            continue
        section = Section(title=m.group(1), when=m.group(2) or "", flags=[])
        for line in lines[n:]:
            e = _ENTRY.match(line)
            if e:
                section.flags.append(Flag(e.group(1), e.group(2) or "", ""))
            elif section.flags and line.startswith("      "):
                f = section.flags[-1]
                f.help = (f.help + " " + line.strip()).strip()
        out.sections.append(section)
    return out


def help_flags(help_):
    """Every flag entry of the page, in order."""
    return [f for s in help_.sections for f in s.flags]


def helpfull_flags(binary, flags_dir):
    """The flags Abseil knows from files under flags_dir (--helpfull)."""
    p = subprocess.run([binary, "--helpfull"], capture_output=True,
                       text=True, timeout=30)
    names, own = set(), False
    for line in p.stdout.split("\n"):
        m = re.match(r"^  Flags from (\S+):$", line)
        if m:
            own = flags_dir in m.group(1)
            continue
        m = re.match(r"^    --(\w+) \(", line)
        if m and own:
            names.add(m.group(1))
    return names


# --- roff -----------------------------------------------------------------

def roff_escape(text):
    """Plain text as roff: backslashes, option hyphens, leading dots."""
    text = text.replace("\\", "\\e")
    text = re.sub(r"(?<![\w-])-{1,2}[A-Za-z][\w-]*",
                  lambda m: m.group(0).replace("-", "\\-"), text)
    if text[:1] in (".", "'"):
        text = "\\&" + text
    return text


def roff_entry(entry):
    """ "-t, --tcp-forward SPEC" -> bold options, italic values."""
    words = []
    for w in entry.split(" "):
        if w.startswith("-"):
            comma = "," if w.endswith(",") else ""
            words.append("\\fB" + w.rstrip(",").replace("-", "\\-") +
                         "\\fR" + comma)
        else:
            words.append("\\fI" + w.replace("\\", "\\e") + "\\fR")
    return " ".join(words)


def options_roff(help_):
    """The OPTIONS section, one .SS per flag group of --help."""
    out = [BEGIN, ".SH OPTIONS"]
    for s in help_.sections:
        if not s.flags:
            continue
        out.append(f'.SS "{s.title}"')
        if s.when:  # "Title: when ..." in --help; a sentence here
            out.append(roff_escape(s.when[:1].upper() + s.when[1:]))
        for f in s.flags:
            out.append(".TP")
            tag = roff_entry(f.entry)
            if f.default:
                tag += f" (default: {roff_escape(f.default)})"
            out.append(tag)
            out.append(roff_escape(f.help))
    out.append(END)
    return "\n".join(out) + "\n"


def with_options(page, options):
    """The man page's text with its OPTIONS part replaced."""
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        raise AssertionError("the page has no BEGIN ... END OPTIONS lines")
    return page[:start] + options + page[end + len(END) + 1:]


def options_part(page):
    start = page.find(BEGIN)
    end = page.find(END)
    if start < 0 or end < start:
        return ""
    return page[start:end + len(END) + 1]


def man_flags(page):
    """Every long option the page's source names, as shown: "http-root"."""
    plain = re.sub(r"\\f[BIRP]|\\&", "", page)
    plain = plain.replace("\\-", "-").replace("\\e", "\\")
    return set(re.findall(r"(?<![\w-])--([A-Za-z][\w-]*)", plain))
