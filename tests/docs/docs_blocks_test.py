"""The docs run in the tests (issue #17 part 2).

Every fenced block in README.md and docs/*.md that is shell (```sh, ```bash,
```console, ```shell, or untagged) has a marker line right before it, an
HTML comment that does not render:

  <!-- doc-test: run NAME; OLD -> NEW; OLD -> NEW; a note -->
  <!-- doc-test: illustrative: REASON -->

A block marked run is executed by the scenario NAME below, in namespaces
this test makes (names carry the pid; removed in `finally`), after the
substitutions its marker lists (whole words; NEW may name a shell variable
the scenario sets) and one that holds for every block:
`bazel run [OPTIONS] //tools/X --`, bazel-bin/tools/X/X and
bazel-out/k8-*/bin/tools/X/X become the tools/X binary this test depends
on (the build under test, whatever its configuration).
A command that serves until stopped (netstackd, splice_proxy,
tcp_benchmark --role=server) runs in the background; the block waits for
its start line, and the scenario stops it afterwards. Every other command's
exit status counts (the block runs under `set -euo pipefail`).

Every block, run or illustrative, also has its invocations of our tools
checked: each flag must be one the tool's --help lists, so a renamed flag
fails here even in a block nobody runs; and every repository path
(bench/x.sh) and Bazel label it names must exist. Needs root (namespaces).
"""
import dataclasses
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", ""),
                        os.environ.get("TEST_WORKSPACE", "netstack"))
if not os.environ.get("TEST_SRCDIR"):  # run by hand from the source tree
    RUNFILES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                            "..")
TOOLS = {
    "netstackd": "tools/netstackd/netstackd",
    "tcp_benchmark": "tools/tcp_benchmark/tcp_benchmark",
    "pcap_inspect": "tools/pcap_inspect/pcap_inspect",
    "splice_proxy": "tools/splice_proxy/splice_proxy",
}
# Flags every tool takes from Abseil's flags library without listing them.
BUILTIN_FLAGS = {"help", "helpfull", "helpshort", "flagfile", "version"}
SHELL_LANGS = {"", "sh", "bash", "console", "shell"}
TAG = str(os.getpid())


def tool_path(tool):
    if not os.environ.get("TEST_SRCDIR"):
        return os.path.join(RUNFILES, "bazel-bin", TOOLS[tool])
    return os.path.join(RUNFILES, TOOLS[tool])


def doc_files():
    paths = [os.path.join(RUNFILES, "README.md")]
    paths += sorted(glob.glob(os.path.join(RUNFILES, "docs", "*.md")))
    return paths


def rel(path):
    """README.md, docs/X.md: runfiles are symlinks, so no realpath."""
    return os.path.relpath(path, RUNFILES)


# --- parsing ---------------------------------------------------------------

@dataclasses.dataclass
class Block:
    file: str
    line: int            # the opening fence's line (1-based)
    lang: str
    lines: list          # [(line number, text without the fence's indent)]
    marker: str = None   # the marker's text after "doc-test:", or None
    marker_line: int = 0

    @property
    def is_shell(self):
        return self.lang in SHELL_LANGS

    @property
    def kind(self):
        if self.marker is None:
            return None
        return self.marker.split(":")[0].split()[0]

    def where(self):
        return f"{self.file}:{self.line}"


_MARKER = re.compile(r"<!--\s*doc-test:\s*(.*?)\s*-->", re.S)


def parse_blocks(text, name):
    """The fenced blocks of one Markdown text, each with its marker."""
    lines = text.split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)\s*([\w+-]*)", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append((i + 1, lines[i][indent:] if lines[i][:indent].strip()
                         == "" else lines[i].lstrip()))
            i += 1
        b = Block(name, start + 1, lang, body)
        # The marker: the comment ending on the last non-blank line before.
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        if j >= 0 and lines[j].rstrip().endswith("-->"):
            k = j
            while k >= 0 and "<!--" not in lines[k]:
                k -= 1
            mm = _MARKER.search("\n".join(lines[k:j + 1])) if k >= 0 else None
            if mm:
                b.marker = " ".join(mm.group(1).split())
                b.marker_line = k + 1
        blocks.append(b)
        i += 1
    return blocks


def marker_problems(blocks):
    out = []
    for b in blocks:
        if b.is_shell and b.marker is None:
            out.append(f"{b.where()}: a ```{b.lang or '(untagged)'} block "
                       "without a <!-- doc-test: run NAME ... --> or "
                       "<!-- doc-test: illustrative: REASON --> marker")
        elif b.marker is not None and b.kind not in ("run", "illustrative"):
            out.append(f"{b.file}:{b.marker_line}: marker neither run nor "
                       f"illustrative: {b.marker}")
        elif (b.kind == "illustrative"
              and not b.marker.partition(":")[2].strip()):
            out.append(f"{b.file}:{b.marker_line}: illustrative needs a reason")
    return out


def logical_commands(lines, shell=True):
    """Joins backslash continuations (outside shell, a usage synopsis: an
    indented line continues the one before): [[(line number, token), ...],
    ...], stopping each at a comment."""
    cmds, cur = [], []
    for i, (n, text) in enumerate(lines):
        cont = text.rstrip().endswith("\\")
        if not shell:
            cont = i + 1 < len(lines) and lines[i + 1][1][:1].isspace()
        body = text.rstrip()[:-1] if text.rstrip().endswith("\\") else text
        for tok in body.split():
            if tok.startswith("#"):
                break
            cur.append((n, tok))
        if not cont:
            if cur:
                cmds.append(cur)
            cur = []
    if cur:
        cmds.append(cur)
    return cmds


_SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "<"}


def invocations(block):
    """(tool, [(line number, flag name)]) for every invocation of one of our
    tools in the block: `bazel run ... //tools/X -- ARGS` or a path or name
    whose last part is the tool's name."""
    found = []
    for cmd in logical_commands(block.lines, block.is_shell):
        toks = [t for _, t in cmd]
        i = 0
        while i < len(cmd):
            tok = toks[i].lstrip("([")
            tool = None
            if tok == "bazel" and i + 1 < len(cmd) and toks[i + 1] == "run":
                j = i + 2
                while j < len(cmd) and toks[j].startswith("--"):
                    j += 1
                m = re.match(r"^//tools/(\w+)(?::(\w+))?$", toks[j]) if (
                    j < len(cmd)) else None
                if m and m.group(1) in TOOLS and (
                        m.group(2) in (None, m.group(1))):
                    tool = m.group(1)
                    i = j + 1
                    if i < len(cmd) and toks[i] == "--":
                        i += 1
                    else:  # no arguments passed
                        found.append((tool, []))
                        continue
            elif ("=" not in tok and not tok.startswith("//")
                  and tok.rsplit("/", 1)[-1] in TOOLS):
                tool = tok.rsplit("/", 1)[-1]
                i += 1
            if tool is None:
                i += 1
                continue
            flags = []
            # In a text block (a usage synopsis) "|" means "or".
            while i < len(cmd) and not (block.is_shell
                                        and toks[i] in _SEPARATORS):
                m = re.match(r"^[\[(]*--([A-Za-z][\w-]*)", toks[i])
                if m:
                    flags.append((cmd[i][0], m.group(1)))
                i += 1
            found.append((tool, flags))
    return found


_HELP_FLAGS = {}


def known_flags(tool):
    if tool not in _HELP_FLAGS:
        p = subprocess.run([tool_path(tool), "--help"], capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0, f"{tool} --help: {p.returncode} {p.stderr}"
        # The grouped --help (tools/common/cli.h: an entry per flag at
        # column 2, "  --http-root DIR" or "  -t, --tcp-forward SPEC");
        # else Abseil's "    --http_root (help...); default: ...".
        names = set(n.replace("-", "_") for n in re.findall(
            r"^  (?:-\w, )?--([\w-]+)", p.stdout, re.M))
        if not names:
            names = set(re.findall(r"^\s+--(\w+) \(", p.stdout, re.M))
        assert names, f"{tool} --help lists no flags:\n{p.stdout}"
        _HELP_FLAGS[tool] = names | BUILTIN_FLAGS
    return _HELP_FLAGS[tool]


def flag_problems(blocks):
    """(problems, number of flags checked)."""
    out, checked = [], 0
    for b in blocks:
        if b.lang in ("cpp", "c++", "c", "python", "py"):
            continue
        for tool, flags in invocations(b):
            known = known_flags(tool)
            for n, flag in flags:
                checked += 1
                if flag.replace("-", "_") not in known:
                    out.append(f"{b.file}:{n}: {tool} has no flag --{flag} "
                               f"(not in `{tool} --help`)")
    return out, checked


def source_root():
    """The source tree: the runfiles are symlinks into it (the test runs
    locally, tags local and no-sandbox)."""
    root = os.path.dirname(os.path.realpath(os.path.join(RUNFILES,
                                                         "README.md")))
    assert os.path.exists(os.path.join(root, "WORKSPACE")), root
    return root


_PATH = re.compile(r"^(?:bench|tools|tests|docs|link|netstack|third_party|"
                   r"\.ci)/[\w./-]*$")
_LABEL = re.compile(r"^//([\w/-]*)(?::([\w.-]+))?$")


def reference_problems(blocks, root):
    """(problems, number checked): every repository path (bench/x.sh,
    tools/dev/main) a block names exists, and every Bazel label's package
    has a BUILD.bazel declaring the target."""
    out, checked = [], 0
    for b in blocks:
        if b.lang in ("cpp", "c++", "c", "python", "py"):
            continue
        for n, text in b.lines:
            for tok in text.split():
                if tok.startswith("#"):
                    break
                tok = tok.split("=", 1)[-1].strip("()[],;'\"`")
                if _PATH.match(tok):
                    checked += 1
                    if not os.path.exists(os.path.join(root, tok)):
                        out.append(f"{b.file}:{n}: no {tok} in the tree")
                    continue
                m = _LABEL.match(tok)
                if not m or tok.endswith("...") or not m.group(1):
                    continue
                checked += 1
                build = os.path.join(root, m.group(1), "BUILD.bazel")
                target = m.group(2) or m.group(1).rsplit("/", 1)[-1]
                if not os.path.exists(build):
                    out.append(f"{b.file}:{n}: no package //{m.group(1)}")
                    continue
                with open(build) as f:
                    if f'name = "{target}"' not in f.read():
                        out.append(f"{b.file}:{n}: no target {tok}")
    return out, checked


def all_blocks():
    blocks = []
    for path in doc_files():
        with open(path) as f:
            blocks += parse_blocks(f.read(), rel(path))
    return blocks


# --- running ---------------------------------------------------------------

def substitutions(marker):
    """[(old, new)] from a run marker's "OLD -> NEW" clauses."""
    subs = []
    for clause in marker.split(";")[1:]:
        if "->" in clause:
            old, new = clause.split("->", 1)
            # "NEW (why)": the parenthesis is for the reader.
            new = re.sub(r"\s+\(.*\)$", "", new.strip())
            subs.append((old.strip().strip("`"), new.strip("`")))
    return subs


def substitute(text, subs):
    text = re.sub(r"bazel run (?:--\S+ +)*//tools/(\w+) --",
                  lambda m: f'"$TOOL_{m.group(1)}"', text)
    text = re.sub(r"\bbazel-(?:bin|out/k8-\w+/bin)/tools/(\w+)/(\w+)\b",
                  lambda m: f'"$TOOL_{m.group(1)}"' if m.group(1) == m.group(2)
                  else m.group(0), text)
    for old, new in subs:
        text = re.sub(r"(?<![\w./$-])" + re.escape(old) + r"(?![\w/-])",
                      lambda _: new, text)
    return text


def is_server(cmd_text):
    t = cmd_text
    return (("//tools/netstackd" in t or re.search(r"(^|/)netstackd ", t))
            and "--help" not in t) or "//tools/splice_proxy" in t or (
                "tcp_benchmark" in t and "--role=server" in t)


_PRELUDE = r"""set -euo pipefail
wait_ready() {  # LOG PID: a server's start line, or its early exit
  for _ in $(seq 200); do
    if grep -qE 'running|listening' "$1"; then return 0; fi
    if ! kill -0 "$2" 2>/dev/null; then
      echo "server exited early:"; cat "$1"; return 1; fi
    sleep 0.05
  done
  echo "server did not start:"; cat "$1"; return 1
}
"""


def block_script(block, logdir):
    """The block as a bash script, substituted, servers in the background."""
    subs = substitutions(block.marker)
    out = [_PRELUDE]
    cmd, nbg = [], 0
    for _, text in block.lines:
        cmd.append(text)
        if text.rstrip().endswith("\\"):
            continue
        original = "\n".join(cmd)
        joined = substitute(original, subs)
        cmd = []
        if is_server(original):
            log = os.path.join(logdir, f"server{nbg}.log")
            nbg += 1
            body = joined.split(" #")[0].rstrip()
            out.append(f"{body} >{log} 2>&1 &\n"
                       f"echo $! >>{logdir}/pids\nwait_ready {log} $!")
        else:
            out.append(joined)
    return "\n".join(out) + "\n"


def sh(*cmd, check=True, timeout=60, input=None):
    return subprocess.run(list(cmd), check=check, capture_output=True,
                          text=True, timeout=timeout, input=input)


class Scenario:
    """Namespaces and files for one run block; close() removes them all and
    stops what the block left running, whatever happened."""

    def __init__(self):
        self.namespaces = []
        self.tmp = tempfile.mkdtemp(prefix="doc-test-")
        self.logdir = os.path.join(self.tmp, "logs")
        os.makedirs(self.logdir)
        self.env = dict(os.environ)
        for tool in TOOLS:
            self.env[f"TOOL_{tool}"] = tool_path(tool)
        self.procs = []

    def ns(self, var, suffix, create=True):
        name = f"doct-{TAG}-{suffix}"
        self.env[var] = name
        self.namespaces.append(name)  # removed even if the block made it
        if create:
            sh("ip", "netns", "add", name)
            sh("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def run(self, block, root_ns, stdin="", timeout=120):
        """Runs the block inside namespace root_ns (its net namespace only:
        `ip netns add` in the block stays visible to us for cleanup)."""
        script = block_script(block, self.logdir)
        path = os.path.join(self.tmp, "block.sh")
        with open(path, "w") as f:
            f.write(script)
        cwd = os.path.join(self.tmp, "cwd")
        os.makedirs(cwd, exist_ok=True)
        p = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{root_ns}", "bash", path],
            cwd=cwd, env=self.env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        self.procs.append(p)
        try:
            out, _ = p.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, _ = p.communicate()
            raise AssertionError(f"{block.where()}: timed out after "
                                 f"{timeout} s:\n{script}\n{out}")
        if p.returncode != 0:
            raise AssertionError(
                f"{block.where()}: exit status {p.returncode}\n--- script:\n"
                f"{script}--- output:\n{out}\n{self.server_logs()}")
        return out, cwd

    def server_logs(self):
        parts = []
        for log in sorted(glob.glob(os.path.join(self.logdir, "server*.log"))):
            with open(log) as f:
                parts.append(f"--- {os.path.basename(log)}:\n{f.read()[-3000:]}")
        return "\n".join(parts)

    def stop_servers(self):
        """SIGTERM to the block's servers (SIGKILL after 10 s)."""
        pids_path = os.path.join(self.logdir, "pids")
        if not os.path.exists(pids_path):
            return
        with open(pids_path) as f:
            pids = [int(x) for x in f.read().split()]
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.time() + 10
        for pid in pids:
            while time.time() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)
            else:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os.unlink(pids_path)

    def close(self):
        self.stop_servers()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for ns in reversed(self.namespaces):
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.tmp, ignore_errors=True)


def scenario_readme_netstackd(block):
    """README, netstackd: the block makes namespace b and the veth pair
    itself, from a namespace of ours standing in for the host; then ping,
    curl and socat against netstackd's services."""
    s = Scenario()
    try:
        host = s.ns("NS_HOST", "host")
        s.ns("NS_B", "b", create=False)  # `ip netns add b` is in the block
        www = os.path.join(s.tmp, "www")
        os.makedirs(www)
        s.env["WWW"] = www
        data = os.urandom(200_000)
        with open(os.path.join(www, "file"), "wb") as f:
            f.write(data)
        line = "doc-test echo line\n"
        out, cwd = s.run(block, host, stdin=line)
        assert "3 packets transmitted, 3 received" in out, out
        with open(os.path.join(cwd, "file"), "rb") as f:
            got = f.read()
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest(), (
            f"curl -O got {len(got)} bytes, not the {len(data)} served")
        assert out.endswith(line), f"socat did not get the echo back:\n{out}"
        s.stop_servers()
        log = s.server_logs()
        assert "running on" in log, log
    finally:
        s.close()


def scenario_readme_splice_proxy(block):
    """README, splice_proxy: in a namespace of ours (its own loopback),
    forwarding to a UNIX echo server; a line through the proxy comes back."""
    s = Scenario()
    try:
        ns = s.ns("NS_P", "proxy")
        sock = os.path.join(s.tmp, "app.sock")
        s.env["SOCK"] = sock
        echo = subprocess.Popen(["socat", f"UNIX-LISTEN:{sock},fork",
                                 "EXEC:cat"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        s.procs.append(echo)
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        s.run(block, ns)
        r = sh("nsenter", f"--net=/run/netns/{ns}", "socat", "-t", "2", "-",
               "TCP:127.0.0.1:8080", input="through the proxy\n")
        assert r.stdout == "through the proxy\n", (r.stdout, r.stderr,
                                                   s.server_logs())
    finally:
        s.close()


def scenario_readme_tcp_benchmark(block):
    """README, tcp_benchmark: the driver (it makes its own namespaces), then
    a netstack server on veth1 in namespace b and iperf3 from the peer."""
    s = Scenario()
    try:
        host = s.ns("NS_HOST", "host")
        b = s.ns("NS_B", "b")
        peer = s.ns("NS_PEER", "peer")
        sh("ip", "link", "add", "veth0", "netns", peer, "type", "veth",
           "peer", "name", "veth1", "netns", b)
        sh("ip", "netns", "exec", b, "sysctl", "-q", "-w",
           "net.ipv6.conf.veth1.disable_ipv6=1")
        sh("ip", "-n", b, "link", "set", "veth1", "up")
        sh("ip", "-n", peer, "addr", "add", "10.9.0.1/24", "dev", "veth0")
        sh("ip", "-n", peer, "link", "set", "veth0", "up")
        out, _ = s.run(block, host, timeout=150)
        # The driver's table and iperf3's summary.
        assert re.search(r"\bhost\b.*\b9000\b", out), out
        assert "receiver" in out and "iperf Done" in out, out
    finally:
        s.close()


def scenario_benchmarks_tcp_loss(block):
    """BENCHMARKS, tcp_benchmark under 5% loss: the driver makes its own
    namespaces; run from one of ours. Its JSON names both roles."""
    s = Scenario()
    try:
        ns = s.ns("NS_HOST", "host")
        out, _ = s.run(block, ns, timeout=60)
        m = re.search(r"^\[\n(.*?)^\]$", out, re.M | re.S)
        assert m, out
        rows = [json.loads(l.rstrip(",")) for l in m.group(1).splitlines()]
        assert sorted(r["netstack_role"] for r in rows) == [
            "receiver", "sender"], rows
        assert all(r["mode"] == "host" and r["bytes"] > 0 for r in rows), rows
    finally:
        s.close()


SCENARIOS = {
    "benchmarks-tcp-loss": scenario_benchmarks_tcp_loss,
    "readme-netstackd": scenario_readme_netstackd,
    "readme-splice-proxy": scenario_readme_splice_proxy,
    "readme-tcp-benchmark": scenario_readme_tcp_benchmark,
}


# --- the tests -------------------------------------------------------------

class Markers(unittest.TestCase):
    def test_every_shell_block_is_marked(self):
        problems = marker_problems(all_blocks())
        self.assertEqual(problems, [], "\n".join(problems))

    def test_every_run_marker_names_a_scenario(self):
        for b in all_blocks():
            if b.kind == "run":
                name = b.marker.split(";")[0].split()[1:]
                with self.subTest(block=b.where()):
                    self.assertTrue(name and name[0] in SCENARIOS,
                                    f"{b.where()}: no scenario {name}")

    def test_unmarked_block_is_named_with_file_and_line(self):
        text = "intro\n\n```sh\necho hi\n```\n\n<!-- doc-test: illustrative: " \
               "x -->\n```sh\necho ok\n```\n```text\nnot shell\n```\n"
        self.assertEqual(
            marker_problems(parse_blocks(text, "X.md")),
            ["X.md:3: a ```sh block without a <!-- doc-test: run NAME ... -->"
             " or <!-- doc-test: illustrative: REASON --> marker"])


class Flags(unittest.TestCase):
    def test_every_tool_flag_in_the_docs_is_in_its_help(self):
        problems, checked = flag_problems(all_blocks())
        self.assertEqual(problems, [], "\n".join(problems))
        self.assertGreater(checked, 20)

    def test_every_path_and_label_in_the_docs_exists(self):
        problems, checked = reference_problems(all_blocks(), source_root())
        self.assertEqual(problems, [], "\n".join(problems))
        self.assertGreater(checked, 20)

    def test_a_renamed_script_or_target_fails_with_file_and_line(self):
        text = ("<!-- doc-test: illustrative: x -->\n```sh\n"
                "bench/no_such_script.sh /tmp/x && bench/callgrind_tx.sh\n"
                "bazel build --config=opt //bench:no_such_benchmark "
                "//tools/netstackd //no/such:pkg //...\n```\n")
        problems, checked = reference_problems(parse_blocks(text, "X.md"),
                                               source_root())
        self.assertEqual(problems, [
            "X.md:3: no bench/no_such_script.sh in the tree",
            "X.md:4: no target //bench:no_such_benchmark",
            "X.md:4: no package //no/such"])
        self.assertEqual(checked, 5)

    def test_a_renamed_flag_fails_with_file_and_line(self):
        # README's netstackd block with --echo-port renamed, as a rename in
        # netstackd (or a typo in the doc) would leave it.
        with open(os.path.join(RUNFILES, "README.md")) as f:
            text = f.read()
        self.assertTrue("--echo-port 7" in text,
                        "README.md no longer has `--echo-port 7`: pick "
                        "another flag to rename here")
        line = text[:text.index("--echo-port 7")].count("\n") + 1
        renamed = text.replace("--echo-port 7", "--echo_port2 7")
        problems, _ = flag_problems(parse_blocks(renamed, "README.md"))
        self.assertEqual(problems, [
            f"README.md:{line}: netstackd has no flag --echo_port2 "
            "(not in `netstackd --help`)"])
        print(f"\nrenamed flag reported: {problems[0]}", file=sys.stderr)

    def test_flags_of_every_form_are_found(self):
        text = ("<!-- doc-test: illustrative: x -->\n```sh\n"
                "bazel run --config=opt //tools/tcp_benchmark -- --role=server \\\n"
                "    --bogus1 && bazel-bin/tools/pcap_inspect/pcap_inspect --bogus2 a\n"
                "bazel build //tools/netstackd --bogus5 # --bogus4\n```\n"
                "```text\nnetstackd --backend (--tap0 tap0 | x) [--bogus3 N]\n"
                "```\n")
        problems, checked = flag_problems(parse_blocks(text, "X.md"))
        self.assertEqual([p.split(":")[1] + ":" + p.split("--")[1].split()[0]
                          for p in problems],
                         ["4:bogus1", "4:bogus2", "8:tap0", "8:bogus3"])
        self.assertEqual(checked, 6)


class Runner(unittest.TestCase):
    """What makes a run block fail: a command's exit status, a server that
    does not start, a command that never ends (the README's old
    `ping 10.9.0.2 && curl ...`, whose ping had no -c)."""

    def run_text(self, body, timeout=30):
        b = parse_blocks("<!-- doc-test: run x -->\n```sh\n" + body +
                         "\n```\n", "X.md")[0]
        s = Scenario()
        try:
            ns = s.ns("NS_X", "runner")
            return s.run(b, ns, timeout=timeout)
        finally:
            s.close()

    def test_a_failing_command_fails_the_block(self):
        with self.assertRaisesRegex(AssertionError, "X.md:2: exit status 1"):
            self.run_text("true\nfalse\ntrue")

    def test_a_server_that_does_not_start_fails_the_block(self):
        with self.assertRaisesRegex(AssertionError, "server exited early"):
            self.run_text("bazel run //tools/netstackd -- --packet lo "
                          "--addr 10.9.0.2/24 --echo_port2 7")

    def test_a_command_that_never_ends_fails_the_block(self):
        with self.assertRaisesRegex(AssertionError, "X.md:2: timed out"):
            self.run_text("ping 127.0.0.1 && echo never", timeout=3)


class RunBlocks(unittest.TestCase):
    def test_run_blocks(self):
        print(file=sys.stderr)
        ran = 0
        for b in all_blocks():
            if b.kind != "run":
                continue
            name = b.marker.split(";")[0].split()[1]
            with self.subTest(block=b.where(), scenario=name):
                t0 = time.time()
                SCENARIOS[name](b)
                ran += 1
                print(f"ran {b.where()} ({name}) in {time.time() - t0:.1f} s",
                      file=sys.stderr)
        self.assertEqual(ran, len(SCENARIOS))


def summary():
    blocks = all_blocks()
    shell = [b for b in blocks if b.is_shell]
    run = [b for b in shell if b.kind == "run"]
    ill = [b for b in shell if b.kind == "illustrative"]
    _, checked = flag_problems(blocks)
    _, refs = reference_problems(blocks, source_root())
    lines = [f"doc blocks: {len(blocks)} fenced, {len(shell)} shell; "
             f"{len(run)} run, {len(ill)} illustrative; {checked} tool flags "
             f"checked against --help; {refs} paths and labels checked"]
    for b in run:
        lines.append(f"  run          {b.where()}: {b.marker.split(';')[0][4:]}")
    for b in ill:
        lines.append(f"  illustrative {b.where()}: "
                     f"{b.marker.split(':', 1)[1].strip()}")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] == ["--summary"]:
        print(summary())
        sys.exit(0)
    try:
        print(summary(), file=sys.stderr)
    except Exception as e:  # the tests below say what is wrong
        print(f"(no summary: {e})", file=sys.stderr)
    unittest.main()
