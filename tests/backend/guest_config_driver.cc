// Test-only: a runtime on a TAP (netstack/runtime/runtime.h) serving the
// guest configuration services (netstack/backend) and nothing else, so
// that real clients (busybox udhcpc, the kernel's SLAAC, rdisc6, a DHCPv6
// client) can be pointed at them. The stack owns the plan's gateway and
// DNS addresses, so it answers ARP/NDP and ping for them.
//
//   guest_config_driver --tap NAME --netns NS [--mtu N]
//
// Prints "running" when ready, the counters on SIGUSR1 and at exit
// (SIGTERM/SIGINT).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "netstack/backend/guest_config_services.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/runtime.h"

ABSL_FLAG(std::string, tap, "", "TAP device to create/attach (required)");
ABSL_FLAG(std::string, netns, "", "network namespace of the TAP");
ABSL_FLAG(uint32_t, mtu, 1500, "the link MTU, announced by DHCP and RA");

namespace netstack::tests {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "guest_config_driver: %s\n",
               std::string(s.message()).c_str());
  return 1;
}

int Run() {
  backend::GuestConfigPlan plan;
  runtime::RuntimeOptions o;
  o.chunks = 256;
  o.packets = 1024;
  o.host.tap_name = absl::GetFlag(FLAGS_tap);
  o.host.netns = absl::GetFlag(FLAGS_netns);
  o.host.mtu = absl::GetFlag(FLAGS_mtu);
  if (o.host.tap_name.empty()) return Fail(absl::InvalidArgumentError("--tap"));
  o.nic_name = o.host.tap_name;
  for (const auto& a : {plan.gateway4, plan.dns4}) {
    o.addrs4.push_back(stack::Ipv4Cidr{a, plan.prefix_len4});
  }
  for (const auto& a : {plan.gateway6, plan.dns6}) {
    o.addrs6.push_back(stack::Ipv6Cidr{a, 64});
  }
  auto rt_or = runtime::Runtime::Create(std::move(o));
  if (!rt_or.ok()) return Fail(rt_or.status());
  runtime::Runtime& rt = **rt_or;
  plan.mtu = rt.link().Capabilities().mtu;
  // In front of the runtime's UDP layer, as in the backend.
  backend::GuestConfigServices services(rt.stack(), rt.chunks(), rt.packets(),
                                        rt.nic(), plan);
  if (auto s = services.Start(rt.loop().Now(), &rt.udp()); !s.ok()) {
    return Fail(s);
  }
  eventloop::PollerRef<backend::GuestConfigServices> services_poller(
      &services);
  rt.loop().AddPoller(&services_poller);
  auto print = [&](const char* why) {
    std::string text = absl::StrCat(rt.stack().FormatCounters(),
                                    services.FormatCounters());
    std::fprintf(stderr, "guest_config_driver: counters (%s):\n%s", why,
                 text.c_str());
    std::fflush(stderr);
  };
  if (auto s = rt.loop().HandleSignals({SIGINT, SIGTERM, SIGUSR1},
                                       [&](int signo, Instant) {
                                         if (signo == SIGUSR1) {
                                           print("SIGUSR1");
                                         } else {
                                           rt.Stop();
                                         }
                                       });
      !s.ok()) {
    return Fail(s);
  }
  std::fprintf(stderr, "guest_config_driver: running on %s, pid %d\n",
               rt.host_link().Name().c_str(), static_cast<int>(getpid()));
  std::fflush(stderr);
  const absl::Status run = rt.Run();
  print("exit");
  rt.loop().RemovePoller(&services_poller);
  return run.ok() ? 0 : Fail(run);
}

}  // namespace
}  // namespace netstack::tests

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return netstack::tests::Run();
}
