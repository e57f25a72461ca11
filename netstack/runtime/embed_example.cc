// docs/BACKEND.md's embedding example, compiled (and run by
// embed_example_test): a network backend for a guest behind a TAP.
//
//   embed_example TAPNAME
//
// Gives the guest behind TAPNAME (made if needed, in this namespace) the
// default plan: 10.0.2.2 as its gateway, a DHCP lease of 10.0.2.100, DNS
// at 10.0.2.3 forwarded to this host's resolvers, and its TCP, UDP and
// ping flows as this host's sockets. Stops on SIGINT or SIGTERM.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "netstack/runtime/runtime.h"

int main(int argc, char** argv) {
  using netstack::runtime::Runtime;
  if (argc != 2) {
    std::fprintf(stderr, "usage: embed_example TAPNAME\n");
    return 2;
  }
  // [embed]
  netstack::runtime::RuntimeOptions options;
  options.host.tap_name = argv[1];                  // or open_link: your own
  options.host.mtu = 65520;
  options.backend = netstack::backend::BackendConfig{};  // the default plan
  options.backend->limits.max_tcp_flows = 4096;
  absl::StatusOr<std::unique_ptr<Runtime>> rt =
      Runtime::Create(std::move(options));
  if (!rt.ok()) {
    std::fprintf(stderr, "embed_example: %s\n",
                 std::string(rt.status().message()).c_str());
    return 1;
  }
  Runtime& net = **rt;
  // Host -> guest: this host's port 8080 to the guest's 80.
  absl::StatusOr<std::vector<netstack::runtime::ForwardRule>> rules =
      netstack::runtime::ParseForwardSpec(/*udp=*/false, "127.0.0.1/8080:80");
  if (rules.ok()) (void)net.forwards()->Add("127.0.0.1/8080:80", *rules);
  (void)net.loop().HandleSignals({SIGINT, SIGTERM},
                                 [&net](int, netstack::Instant) { net.Stop(); });
  const absl::Status run = net.Run();  // or: poll fd(), NextDeadline(), Poll()
  std::fputs(net.FormatCounters().c_str(), stderr);
  // [embed]
  return run.ok() ? 0 : 1;
}
