// tcp_benchmark: an iperf3-compatible TCP throughput tool on netstack or
// the host kernel.
//
//   tcp_benchmark --role=server --stack=kernel [--port 5201] [--one_off]
//   tcp_benchmark --role=client --stack=kernel --connect 10.9.0.1:5201
//       [--duration 10] [--streams 4] [--reverse] [--json]
//   tcp_benchmark --role=server --stack=netstack --packet veth1 --netns b
//       --addr 10.9.0.2/24
//   tcp_benchmark --role=server --stack=kernel --rr [--port 5201]
//   tcp_benchmark --role=client --stack=kernel --rr|--crr|--udp-rr
//       --connect HOST:PORT [--duration 10] [--json]
//                                    (request/response, request_response.h)
//   tcp_benchmark            (no --role: the driver, see driver.h)
//
// Either role talks to stock iperf3 3.x as well as to itself. Exit status:
// 0 when the test(s) succeeded, 1 when a test failed or a resource could
// not be set up, 2 for bad flags. --help: BenchHelpPage() below.
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "netstack/transport/address.h"
#include "tools/common/cli.h"
#include "tools/tcp_benchmark/bench_net.h"
#include "tools/tcp_benchmark/driver.h"
#include "tools/tcp_benchmark/flags.h"
#include "tools/tcp_benchmark/iperf3_client.h"
#include "tools/tcp_benchmark/iperf3_server.h"
#include "tools/tcp_benchmark/kernel_net.h"
#include "tools/tcp_benchmark/netstack_net.h"
#include "tools/tcp_benchmark/request_response.h"
#include "tools/tcp_benchmark/test_summary.h"

namespace netstack::tools::bench {
namespace {

absl::Status Usage(const std::string& message);

absl::Status Usage(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

struct RoleConfig {
  bool server = false;
  bool kernel = false;
  std::optional<RrMode> rr;  // --rr/--crr instead of iperf3
  transport::SocketAddress remote;  // client
  uint16_t port = 0;                // server
  KernelNetOptions kernel_options;
  StreamOptions stream_options;
};

absl::Status CheckMeasurementFlags() {
  if (!(absl::GetFlag(FLAGS_duration) > 0) ||
      absl::GetFlag(FLAGS_duration) > 86400) {
    return Usage("--duration must be in (0, 86400] seconds");
  }
  if (!(absl::GetFlag(FLAGS_interval) >= 0)) {
    return Usage("--interval must be >= 0");
  }
  if (absl::GetFlag(FLAGS_streams) < 1 || absl::GetFlag(FLAGS_streams) > 128) {
    return Usage("--streams must be in 1..128");
  }
  const std::string cc = absl::GetFlag(FLAGS_cc);
  if (!cc.empty() && cc != "reno" && cc != "cubic") {
    return Usage("--cc must be reno or cubic");
  }
  return absl::OkStatus();
}

absl::StatusOr<RoleConfig> ParseRoleConfig() {
  RoleConfig c;
  const std::string role = absl::GetFlag(FLAGS_role);
  const std::string stack = absl::GetFlag(FLAGS_stack);
  if (role != "server" && role != "client") {
    return Usage("--role must be server or client (or absent: driver mode)");
  }
  if (stack != "kernel" && stack != "netstack") {
    return Usage("--stack must be kernel or netstack");
  }
  c.server = role == "server";
  c.kernel = stack == "kernel";
  if (absl::Status s = CheckMeasurementFlags(); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_rr) + absl::GetFlag(FLAGS_crr) +
          absl::GetFlag(FLAGS_udp_rr) > 1) {
    return Usage("--rr, --crr and --udp-rr exclude each other");
  }
  if (absl::GetFlag(FLAGS_udp_rr) && c.server) {
    return Usage("--udp-rr is a client's; the --rr server answers UDP too");
  }
  if (absl::GetFlag(FLAGS_rr) || absl::GetFlag(FLAGS_crr) ||
      absl::GetFlag(FLAGS_udp_rr)) {
    if (!c.kernel) {
      return Usage("--rr/--crr/--udp-rr apply to --stack=kernel only");
    }
    if (absl::GetFlag(FLAGS_reverse) || absl::GetFlag(FLAGS_one_off) ||
        absl::GetFlag(FLAGS_streams) != 1) {
      return Usage("--reverse, --one_off and --streams are iperf3's; not "
                   "with --rr/--crr");
    }
    c.rr = absl::GetFlag(FLAGS_rr)    ? RrMode::kRr
           : absl::GetFlag(FLAGS_crr) ? RrMode::kCrr
                                      : RrMode::kUdpRr;
  }
  if (c.server) {
    const int port = absl::GetFlag(FLAGS_port);
    if (port < 1 || port > 65535) return Usage("--port must be in 1..65535");
    c.port = static_cast<uint16_t>(port);
  } else {
    const std::string connect = absl::GetFlag(FLAGS_connect);
    std::optional<transport::SocketAddress> remote =
        transport::SocketAddress::Parse(connect);
    if (!remote || remote->port == 0) {
      return Usage(absl::StrCat("--connect: want HOST:PORT or [V6]:PORT, got '",
                                connect, "'"));
    }
    c.remote = *remote;
  }
  absl::StatusOr<RecvMode> recv = ParseRecvMode(absl::GetFlag(FLAGS_recv_mode));
  if (!recv.ok()) return recv.status();
  absl::StatusOr<SendMode> send = ParseSendMode(absl::GetFlag(FLAGS_send_mode));
  if (!send.ok()) return send.status();
  if (!c.kernel && (*recv != RecvMode::kPlain || *send != SendMode::kPlain)) {
    return Usage("--recv_mode/--send_mode apply to --stack=kernel only");
  }
  c.kernel_options.recv_mode = *recv;
  c.kernel_options.send_mode = *send;
  c.stream_options.no_delay = true;
  c.stream_options.congestion_control = absl::GetFlag(FLAGS_cc);
  return c;
}

// The address the server listens on: every address. For the kernel an
// IPv6 socket also takes IPv4 (unless net.ipv6.bindv6only); netstack
// listens on the family it has an address of.
transport::SocketAddress ServerAddress(const RoleConfig& c) {
  const bool v6 = c.kernel ? true
                           : absl::GetFlag(FLAGS_addr).empty() &&
                                 !absl::GetFlag(FLAGS_addr6).empty();
  std::optional<transport::IpAddress> any =
      transport::IpAddress::Parse(v6 ? "::" : "0.0.0.0");
  return transport::SocketAddress{*any, c.port};
}

// SIGUSR1: the stack's counters now, and the run goes on (as netstackd
// and splice_proxy do).
void PrintCounters(Net& net, const char* why) {
  const std::string counters = net.FormatCounters();
  if (counters.empty()) {
    std::fprintf(stderr,
                 "tcp_benchmark: %s: %s has no counters of ours (the kernel "
                 "stack: see nstat or ss -ti)\n",
                 why, net.Describe().c_str());
  } else {
    std::fprintf(stderr, "tcp_benchmark: %s:\n%s\n", why, counters.c_str());
  }
}

int RunServer(Net& net, const RoleConfig& c) {
  ServerOptions o;
  o.local = ServerAddress(c);
  o.one_off = absl::GetFlag(FLAGS_one_off);
  o.json = absl::GetFlag(FLAGS_json);
  o.stack_name = c.kernel ? "kernel" : "netstack";
  o.stream_options = c.stream_options;
  o.session.interval = absl::GetFlag(FLAGS_interval);
  o.session.progress = o.json ? stderr : stdout;
  int exit_status = 0;
  Iperf3Server server(net, o, [&](int status) {
    exit_status = status;
    net.loop().Stop();
  });
  absl::Status s = net.loop().HandleSignals(
      {SIGINT, SIGTERM, SIGUSR1}, [&](int signo, Instant) {
        if (signo == SIGUSR1) return PrintCounters(net, "SIGUSR1");
        server.Stop();
      });
  if (s.ok()) s = server.Start();
  if (s.ok()) s = net.loop().Run();
  // The last control messages may still be unacknowledged (netstack:
  // they die with the process).
  net.Linger(absl::Seconds(5));
  if (!s.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (std::string counters = net.FormatCounters();
      absl::GetFlag(FLAGS_exit_counters) && !counters.empty()) {
    std::fprintf(stderr, "%s\n", counters.c_str());
  }
  return exit_status;
}

int RunClient(Net& net, const RoleConfig& c) {
  const bool json = absl::GetFlag(FLAGS_json);
  ClientOptions o;
  o.server = c.remote;
  o.duration = absl::GetFlag(FLAGS_duration);
  o.interval = absl::GetFlag(FLAGS_interval);
  o.streams = absl::GetFlag(FLAGS_streams);
  o.reverse = absl::GetFlag(FLAGS_reverse);
  o.stream_options = c.stream_options;
  o.progress = json ? stderr : stdout;
  Iperf3Client client(net, o, [&] { net.loop().Stop(); });
  absl::Status s = net.loop().HandleSignals(
      {SIGINT, SIGTERM, SIGUSR1}, [&](int signo, Instant) {
        if (signo == SIGUSR1) return PrintCounters(net, "SIGUSR1");
        client.Interrupt();
      });
  if (s.ok()) s = client.Start();
  if (s.ok()) s = net.loop().Run();
  net.Linger(absl::Seconds(5));
  // The stack's counters (drops with their reasons, link syscalls, GSO
  // splits), whatever the outcome: they explain a slow or failed run.
  if (std::string counters = net.FormatCounters();
      absl::GetFlag(FLAGS_exit_counters) && !counters.empty()) {
    std::fprintf(stderr, "%s\n", counters.c_str());
  }
  if (!s.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!client.result().ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n",
                 std::string(client.result().status().message()).c_str());
    return 1;
  }
  const TestSummary& summary = *client.result();
  std::fprintf(o.progress, "%s",
               FormatSummaryText(summary, /*local_is_sender=*/!o.reverse).c_str());
  if (json) {
    SummaryContext context{"client", c.kernel ? "kernel" : "netstack",
                           net.Describe(), c.remote.ToString(), o.reverse};
    std::printf("%s\n", FormatSummaryJson(summary, context).c_str());
  }
  std::fflush(stdout);
  return 0;
}

// --rr/--crr server: answers until SIGINT/SIGTERM, UDP_RR's datagrams on
// the same port too.
int RunRrServer(Net& net, const RoleConfig& c) {
  RrServer server(net, ServerAddress(c), c.stream_options,
                  absl::GetFlag(FLAGS_json) ? stderr : stdout);
  UdpRrServer udp(net.loop(), ServerAddress(c));
  absl::Status s = net.loop().HandleSignals(
      {SIGINT, SIGTERM, SIGUSR1}, [&](int signo, Instant) {
        if (signo == SIGUSR1) return PrintCounters(net, "SIGUSR1");
        server.Stop();
        udp.Stop();
        net.loop().Stop();
      });
  if (s.ok()) s = server.Start();
  if (s.ok()) s = udp.Start();
  if (s.ok()) s = net.loop().Run();
  if (!s.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(absl::GetFlag(FLAGS_json) ? stderr : stdout,
               "RR server: %llu connections, %llu bytes answered\n",
               static_cast<unsigned long long>(server.connections()),
               static_cast<unsigned long long>(server.bytes_answered()));
  return 0;
}

// --udp-rr: blocking, on a socket of its own (SIGINT ends the process).
int RunUdpRrRole(Net& net, const RoleConfig& c) {
  const bool json = absl::GetFlag(FLAGS_json);
  UdpRrOptions o;
  o.server = c.remote;
  o.duration = absl::GetFlag(FLAGS_duration);
  absl::StatusOr<RrResult> r = RunUdpRrClient(o);
  if (!r.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n",
                 std::string(r.status().message()).c_str());
    return 1;
  }
  std::fprintf(json ? stderr : stdout, "%s", FormatRrText(*r).c_str());
  if (json) {
    std::printf("%s\n",
                FormatRrJson(*r, c.remote.ToString(), net.Describe()).c_str());
  }
  std::fflush(stdout);
  return 0;
}

int RunRrClient(Net& net, const RoleConfig& c) {
  if (*c.rr == RrMode::kUdpRr) return RunUdpRrRole(net, c);
  const bool json = absl::GetFlag(FLAGS_json);
  RrClientOptions o;
  o.server = c.remote;
  o.mode = *c.rr;
  o.duration = absl::GetFlag(FLAGS_duration);
  o.stream_options = c.stream_options;
  RrClient client(net, o, [&] { net.loop().Stop(); });
  absl::Status s = net.loop().HandleSignals(
      {SIGINT, SIGTERM, SIGUSR1}, [&](int signo, Instant) {
        if (signo == SIGUSR1) return PrintCounters(net, "SIGUSR1");
        client.Interrupt();
      });
  if (s.ok()) s = client.Start();
  if (s.ok()) s = net.loop().Run();
  if (!s.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  if (!client.result().ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s: %s\n", RrModeName(o.mode),
                 std::string(client.result().status().message()).c_str());
    return 1;
  }
  std::fprintf(json ? stderr : stdout, "%s",
               FormatRrText(*client.result()).c_str());
  if (json) {
    std::printf("%s\n", FormatRrJson(*client.result(), c.remote.ToString(),
                                     net.Describe())
                            .c_str());
  }
  std::fflush(stdout);
  return 0;
}

int RunRole() {
  absl::StatusOr<RoleConfig> config = ParseRoleConfig();
  if (!config.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s (see --help)\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<Net>> net =
      config->kernel ? CreateKernelNet(config->kernel_options)
                     : CreateNetstackNetFromFlags();
  if (!net.ok()) {
    std::fprintf(stderr, "tcp_benchmark: %s\n",
                 std::string(net.status().message()).c_str());
    return net.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (config->rr) {
    return config->server ? RunRrServer(**net, *config)
                          : RunRrClient(**net, *config);
  }
  return config->server ? RunServer(**net, *config) : RunClient(**net, *config);
}


// --help: the usage lines, then the flags (flags.cc) by task.
netstack::tools::HelpPage BenchHelpPage() {
  netstack::tools::HelpPage page;
  page.tool = "tcp_benchmark";
  page.usage =
      "usage: tcp_benchmark [DRIVER FLAGS]\n"
      "         measure netstack and the kernel in namespaces of its own\n"
      "       tcp_benchmark --role=server --stack=kernel|netstack [--port N]\n"
      "         answer iperf3 clients (as iperf3 -s)\n"
      "       tcp_benchmark --role=client --stack=kernel|netstack --connect "
      "HOST:PORT\n"
      "         measure against an iperf3 server (as iperf3 -c)\n"
      "       tcp_benchmark --role=server|client --stack=kernel --rr|--crr "
      "...\n"
      "         netperf's TCP_RR and TCP_CRR, between two tcp_benchmarks\n"
      "       tcp_benchmark --role=client --stack=kernel --udp-rr --connect "
      "HOST:PORT\n"
      "         netperf's UDP_RR, against a --rr server\n";
  page.description =
      "An iperf3-compatible TCP throughput benchmark on netstack or the "
      "host kernel. Without --role, tcp_benchmark is the driver: it builds "
      "its own namespaces and link, runs both roles and the kernel "
      "baseline, and prints a table."
      "\n\n"
      "Both roles speak iperf3's protocol (TCP), so either end may be "
      "stock iperf3. --rr and --crr (kernel roles only) are netperf's "
      "TCP_RR and TCP_CRR instead: 1-byte requests and responses, on one "
      "connection or a new one each; the client prints transactions/s and "
      "microseconds per transaction (mean, p50, p99, max)."
      "\n\n"
      "The client prints interval lines and a summary (with --json: one "
      "JSON object on stdout, progress on stderr); the server prints a "
      "summary per test and serves until SIGINT or SIGTERM, or one test "
      "with --one-off. SIGUSR1 prints the stack's counters to stderr and "
      "the run goes on.";
  page.groups = {
      {"Driver",
       "without --role: what the driver measures, over which link.",
       {"--client", "--server", "--modes LIST", "--mtus LIST",
        "--link packet|tap", "--kernel-baseline", "--keep-topology",
        "--ideal", "--verbose"}},
      {"Roles",
       "with --role: one end of a measurement (the other may be iperf3).",
       {"--role server|client", "--stack netstack|kernel",
        "--connect HOST:PORT", "--port N", "--one-off", "--reverse", "--rr",
        "--crr", "--udp-rr"}},
      {"Measurement",
       "how long and how much is measured, and how it is reported.",
       {"--duration S", "--interval S", "--streams N", "--cc reno|cubic",
        "--json", "--exit-counters"}},
      {"Kernel stack",
       "with --stack=kernel: how the host's sockets move the bytes.",
       {"--recv-mode plain|splice", "--send-mode plain|vmsplice|sendfile"}},
      {"netstack",
       "with --stack=netstack, and the driver: netstack's link and options.",
       {"--packet IFNAME", "--tap NAME", "--netns NS", "--addr CIDR",
        "--addr6 CIDR", "--mtu N", "--gso N", "--swgso", "--hostgso",
        "--sack", "--pcap PATH"}},
      {"Fault injection",
       "to measure netstack's link under loss, delay and reordering. F is "
       "a fraction (0.01 = 1%), D a duration (5ms).",
       {"--loss F", "--duplicate F", "--reorder F", "--latency D",
        "--seed N"}},
  };
  page.exit_status =
      "Exit status:\n"
      "  0    the tests succeeded, or --help\n"
      "  1    a test failed or a resource could not be set up\n"
      "  2    bad flags\n";
  page.flags_dir = "tools/tcp_benchmark/";
  return page;
}

}  // namespace
}  // namespace netstack::tools::bench

int main(int argc, char** argv) {
  netstack::tools::SetHelpPage(netstack::tools::bench::BenchHelpPage());
  netstack::tools::DashesToUnderscores(argc, argv);
  netstack::tools::ParseCommandLineOrExit("tcp_benchmark", argc, argv);
  // splice() and sendfile() into a reset socket raise SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  if (absl::GetFlag(FLAGS_role).empty()) {
    if (absl::GetFlag(FLAGS_rr) || absl::GetFlag(FLAGS_crr) ||
        absl::GetFlag(FLAGS_udp_rr)) {
      std::fprintf(stderr,
                   "tcp_benchmark: --rr/--crr/--udp-rr need --role (the "
                   "driver measures "
                   "throughput only; see --help)\n");
      return 2;
    }
    return netstack::tools::bench::RunDriver(argv[0]);
  }
  return netstack::tools::bench::RunRole();
}
