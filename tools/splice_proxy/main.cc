// splice_proxy: a port forwarder on netstack's Relay.
//
//   splice_proxy --listen 127.0.0.1:8080 --connect unix:/run/app.sock
//                --listen [::]:8443 --connect 127.0.0.1:443 --mode=auto
//
// --listen and --connect repeat and pair up in order. Stats go to stderr on
// SIGUSR1 and at exit; SIGINT and SIGTERM stop it cleanly. Usage errors
// exit 2; a forward that cannot start is reported and the others run (exit
// 1 only when none can).
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "netstack/forward/relay.h"
#include "tools/common/cli.h"
#include "tools/splice_proxy/proxy.h"
#include "tools/splice_proxy/socket_address.h"

// --listen and --connect are taken out of argv before Abseil parses it
// (Abseil keeps only the last value of a repeated flag); they are declared
// here so that --help lists them and a --flagfile use can be refused.
ABSL_FLAG(std::string, listen, "",
          "Where to accept connections: IPV4:PORT, [IPV6]:PORT (IPv6 only; "
          "[fe80::1%eth0]:PORT for a scope) or unix:PATH (unix:@NAME: "
          "abstract). Numeric addresses only. Port 0 picks a free port "
          "(logged at start). Repeatable: the i-th --listen forwards to the "
          "i-th --connect. Command line only, not in a --flagfile.");
ABSL_FLAG(std::string, connect, "",
          "Where to forward each accepted connection, same syntax as "
          "--listen (port 0 is not allowed). Repeatable, paired in order.");
ABSL_FLAG(std::string, mode, "auto",
          "splice: move the bytes with splice(2) through a pipe per "
          "direction (copy only where splice cannot: EINVAL before any "
          "byte, or no pipe to be had); copy: recv/send through a user "
          "buffer; auto: per direction, copy while reads are small, splice "
          "from the first read of at least --auto_threshold bytes (from a "
          "TCP source only if its segments are at least --auto_min_segment "
          "bytes), and back to copy after a few small reads in a row.");
ABSL_FLAG(uint64_t, pipe_size, uint64_t{1} << 20,
          "Pipe capacity to ask for (F_SETPIPE_SZ), 4096 to 1 GiB; the "
          "kernel may grant less (fs.pipe-max-size, "
          "fs.pipe-user-pages-soft), which the stats count as "
          "resize_refused.");
ABSL_FLAG(uint64_t, max_pipes, 4096,
          "At most this many pipes in use or pooled. A direction holds a "
          "pipe only while it has bytes to move; one that never got a pipe "
          "copies for good (fallback_no_pipe), one that had a pipe copies a "
          "while and asks again (pipe_shortages). 0: never splice.");
ABSL_FLAG(uint64_t, auto_threshold,
          netstack::forward::kDefaultAutoSpliceThreshold,
          "--mode=auto: a direction switches to splice once one read "
          "returns at least this many bytes (capped at --copy_buffer: a "
          "full buffer counts).");
ABSL_FLAG(uint64_t, auto_min_segment,
          netstack::forward::kDefaultAutoSpliceMinSegment,
          "--mode=auto, TCP sources: splice only while the segment size the "
          "kernel measured on the source (TCP_INFO rcv_mss) is at least "
          "this; smaller segments cost more spliced than copied (the "
          "stats count each refusal as segment_vetoes). A remote peer's "
          "segments are its MSS (1448 on Ethernet), so such a source is "
          "copied unless --mode=splice. 0: no check.");
ABSL_FLAG(uint64_t, copy_buffer, 64 * 1024,
          "User buffer per direction of the copy path, 1 KiB to 64 MiB.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(10),
          "Give up on a target that has not answered within this time; the "
          "client connection is then closed (reset for TCP) and the reason "
          "logged.");
ABSL_FLAG(absl::Duration, shutdown_grace, absl::Seconds(2),
          "After SIGINT/SIGTERM, let open connections finish for up to this "
          "long, then close them. A second signal closes them at once.");
ABSL_FLAG(absl::Duration, pipe_idle_timeout, absl::Seconds(10),
          "When no connection has been open for this long, close the pooled "
          "pipes (each counts against fs.pipe-user-pages-soft); 'inf' keeps "
          "them.");
ABSL_FLAG(int, backlog, 4096,
          "listen(2) backlog of each --listen (the kernel caps it at "
          "net.core.somaxconn).");
ABSL_FLAG(bool, verbose, false,
          "Log every connection (default: only failures and errors).");
ABSL_FLAG(bool, require_all, false,
          "Exit with status 1 if any forward cannot start (default: report "
          "it and run the others).");

namespace netstack::tools {
namespace {

absl::Status Usage(std::string message) {
  return absl::InvalidArgumentError(std::move(message));
}

// The values of --listen and --connect in order, and argv without them.
struct SplitArgs {
  std::vector<std::string> listen;
  std::vector<std::string> connect;
  std::vector<char*> rest;
};

// Accepts -name, --name, with =VALUE or VALUE as the next argument; stops
// at "--" like Abseil does.
absl::StatusOr<SplitArgs> SplitRepeatedFlags(int argc, char** argv) {
  SplitArgs out;
  out.rest.push_back(argv[0]);
  int i = 1;
  for (; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    std::string_view name = arg;
    if (name.substr(0, 2) == "--") {
      name.remove_prefix(2);
    } else if (name.substr(0, 1) == "-") {
      name.remove_prefix(1);
    } else {
      out.rest.push_back(argv[i]);
      continue;
    }
    const size_t eq = name.find('=');
    const std::string_view flag = name.substr(0, eq);
    std::vector<std::string>* values = flag == "listen"    ? &out.listen
                                       : flag == "connect" ? &out.connect
                                                           : nullptr;
    if (values == nullptr) {
      out.rest.push_back(argv[i]);
      continue;
    }
    if (eq != std::string_view::npos) {
      values->emplace_back(name.substr(eq + 1));
    } else if (i + 1 < argc) {
      values->emplace_back(argv[++i]);
    } else {
      return Usage(absl::StrCat("--", std::string(flag), " needs a value"));
    }
  }
  for (; i < argc; ++i) out.rest.push_back(argv[i]);
  return out;
}

// A forward with a malformed address cannot start; the others can.
ForwardSpec ParseForward(const std::string& listen, const std::string& connect,
                         const ForwarderOptions& defaults) {
  ForwardSpec spec{listen, connect, absl::OkStatus(), defaults};
  auto l = SocketAddress::Parse(listen);
  auto c = SocketAddress::Parse(connect);
  if (!l.ok()) {
    spec.error = absl::InvalidArgumentError(
        absl::StrCat("--listen: ", std::string(l.status().message())));
  } else if (!c.ok()) {
    spec.error = absl::InvalidArgumentError(
        absl::StrCat("--connect: ", std::string(c.status().message())));
  } else if (!c->is_unix() && c->port() == 0) {
    spec.error = absl::InvalidArgumentError(
        absl::StrCat("--connect ", connect, ": port 0 is not a target"));
  } else if (c->is_wildcard()) {
    spec.error = absl::InvalidArgumentError(absl::StrCat(
        "--connect ", connect, ": a wildcard address is not a target"));
  } else if (*l == *c || (l->family() == c->family() && l->is_wildcard() &&
                          c->is_loopback() && l->port() == c->port())) {
    spec.error = absl::InvalidArgumentError(
        absl::StrCat("--connect ", connect, " is the forward's own --listen ",
                     listen, ": every connection would connect to itself"));
  } else {
    spec.options.listen = *l;
    spec.options.target = *c;
  }
  return spec;
}

absl::Status CheckRange(const char* name, uint64_t value, uint64_t lo,
                        uint64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return Usage(absl::StrCat("--", name, " ", value, " out of range [", lo, ", ",
                            hi, "]"));
}

absl::StatusOr<ProxyConfig> ParseConfig(const SplitArgs& args) {
  if (!absl::GetFlag(FLAGS_listen).empty() ||
      !absl::GetFlag(FLAGS_connect).empty()) {
    return Usage(
        "--listen and --connect are read from the command line "
        "only, not from a --flagfile");
  }
  if (args.listen.empty() && args.connect.empty()) {
    return Usage("at least one --listen/--connect pair is required");
  }
  if (args.listen.size() != args.connect.size()) {
    return Usage(absl::StrCat(args.listen.size(), " --listen but ",
                              args.connect.size(),
                              " --connect: they pair up in order"));
  }
  ProxyConfig config;
  ForwarderOptions defaults;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  const std::optional<forward::RelayMode> relay_mode =
      forward::ParseRelayMode(mode);
  if (!relay_mode) {
    return Usage(
        absl::StrCat("--mode: '", mode, "' is not splice, copy or auto"));
  }
  defaults.relay.mode = *relay_mode;
  const uint64_t pipe_size = absl::GetFlag(FLAGS_pipe_size);
  const uint64_t auto_threshold = absl::GetFlag(FLAGS_auto_threshold);
  const uint64_t copy_buffer = absl::GetFlag(FLAGS_copy_buffer);
  const int backlog = absl::GetFlag(FLAGS_backlog);
  for (absl::Status s :
       {CheckRange("pipe_size", pipe_size, 4096, uint64_t{1} << 30),
        CheckRange("auto_threshold", auto_threshold, 1, uint64_t{1} << 30),
        CheckRange("copy_buffer", copy_buffer, 1024, uint64_t{64} << 20),
        CheckRange("backlog", backlog < 0 ? 0 : backlog, 1, 1 << 20)}) {
    if (!s.ok()) return s;
  }
  defaults.relay.auto_splice_threshold = auto_threshold;
  defaults.relay.auto_splice_min_segment =
      absl::GetFlag(FLAGS_auto_min_segment);
  defaults.relay.copy_buffer_size = copy_buffer;
  defaults.backlog = backlog;
  defaults.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  defaults.verbose = absl::GetFlag(FLAGS_verbose);
  config.verbose = defaults.verbose;
  config.shutdown_grace = absl::GetFlag(FLAGS_shutdown_grace);
  config.pipe_idle_timeout = absl::GetFlag(FLAGS_pipe_idle_timeout);
  if (defaults.connect_timeout <= absl::ZeroDuration()) {
    return Usage("--connect_timeout must be positive");
  }
  if (config.shutdown_grace < absl::ZeroDuration() ||
      config.pipe_idle_timeout < absl::ZeroDuration()) {
    return Usage(
        "--shutdown_grace and --pipe_idle_timeout must not be "
        "negative");
  }
  config.pipes.pipe_size = pipe_size;
  config.pipes.max_pipes = absl::GetFlag(FLAGS_max_pipes);
  for (size_t i = 0; i < args.listen.size(); ++i) {
    config.forwards.push_back(
        ParseForward(args.listen[i], args.connect[i], defaults));
  }
  return config;
}

int Run(ProxyConfig config) {
  // A write to a socket whose peer is gone must be an EPIPE the relay
  // reports, not a signal that kills the proxy (splice(2) has no
  // MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);
  const size_t forwards = config.forwards.size();
  auto proxy = Proxy::Create(std::move(config));
  if (!proxy.ok()) {
    std::fprintf(stderr, "splice_proxy: %s\n",
                 std::string(proxy.status().message()).c_str());
    return 1;
  }
  auto started = (*proxy)->Start();
  if (!started.ok()) {
    std::fprintf(stderr, "splice_proxy: %s\n",
                 std::string(started.status().message()).c_str());
    return 1;
  }
  if (*started == 0) {
    std::fprintf(stderr, "splice_proxy: no forward could start\n");
    return 1;
  }
  if (*started < forwards && absl::GetFlag(FLAGS_require_all)) {
    std::fprintf(stderr,
                 "splice_proxy: %zu of %zu forwards could not start "
                 "(--require_all)\n",
                 forwards - *started, forwards);
    return 1;
  }
  const absl::Status run = (*proxy)->Run();
  if (!run.ok()) {
    std::fprintf(stderr, "splice_proxy: %s\n",
                 std::string(run.message()).c_str());
    return 1;
  }
  return 0;
}

// --help: the usage line, then the flags by task. The names keep their
// '_': splice_proxy does not take '-' for it.
HelpPage SpliceProxyHelpPage() {
  HelpPage page;
  page.tool = "splice_proxy";
  page.dashed_names = false;
  page.usage =
      "usage: splice_proxy --listen ADDR --connect ADDR [FLAGS]\n"
      "         forward the connections --listen accepts to --connect; repeat\n"
      "         the pair for more forwards (the i-th --listen to the i-th\n"
      "         --connect)\n";
  page.description =
      "Forwards TCP and UNIX stream connections; the bytes move with "
      "splice(2) through pipes, without entering user memory. ADDR is "
      "IPV4:PORT, [IPV6]:PORT or unix:PATH, any family to any family."
      "\n\n"
      "Each accepted connection gets a non-blocking connect to its target; "
      "if the target refuses or does not answer within --connect_timeout, "
      "that client is closed (a TCP client gets a reset) and the reason "
      "logged, and the proxy keeps serving. A half-close is passed on once "
      "every byte before it has been delivered. An error on one side of a "
      "connection closes both sides and is logged."
      "\n\n"
      "A forward that cannot start (bad address, address in use, ...) is "
      "reported and the others run. A unix: listener replaces a stale "
      "socket file nobody listens on, and removes the file at exit."
      "\n\n"
      "Stats per forward and in total (connections, bytes and syscalls per "
      "direction, bytes by path splice/copy, fallbacks, errors, pipes) go "
      "to stderr on SIGUSR1 and at exit. SIGINT or SIGTERM stop it: "
      "listeners close at once, open connections get --shutdown_grace.";
  page.groups = {
      {"Forwards",
       "always: where to accept connections and where each one goes.",
       {"--listen ADDR", "--connect ADDR", "--connect_timeout D",
        "--backlog N", "--require_all"}},
      {"Copy or splice",
       "to choose how the bytes move; auto suits most uses.",
       {"--mode splice|copy|auto", "--auto_threshold N",
        "--auto_min_segment N", "--copy_buffer N"}},
      {"Pipes",
       "when splicing: the pipes' size, how many, how long pooled ones "
       "stay.",
       {"--pipe_size N", "--max_pipes N", "--pipe_idle_timeout D"}},
      {"Stopping and logs",
       "how it stops, and what it logs.",
       {"--shutdown_grace D", "--verbose"}},
  };
  page.exit_status =
      "Exit status:\n"
      "  0    after a clean stop, and for --help\n"
      "  1    no forward could start (or one could not, with --require_all)\n"
      "  2    bad flags\n";
  page.flags_dir = "tools/splice_proxy/";
  return page;
}

}  // namespace
}  // namespace netstack::tools

int main(int argc, char** argv) {
  netstack::tools::SetHelpPage(netstack::tools::SpliceProxyHelpPage());
  auto split = netstack::tools::SplitRepeatedFlags(argc, argv);
  if (!split.ok()) {
    std::fprintf(stderr, "splice_proxy: %s (see --help)\n",
                 std::string(split.status().message()).c_str());
    return 2;
  }
  const std::vector<char*> positional =
      netstack::tools::ParseCommandLineOrExit(
          "splice_proxy", static_cast<int>(split->rest.size()),
          split->rest.data());
  if (positional.size() > 1) {
    std::fprintf(stderr,
                 "splice_proxy: unexpected argument '%s' (see --help)\n",
                 positional[1]);
    return 2;
  }
  auto config = netstack::tools::ParseConfig(*split);
  if (!config.ok()) {
    std::fprintf(stderr, "splice_proxy: %s (see --help)\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  return netstack::tools::Run(std::move(*config));
}
