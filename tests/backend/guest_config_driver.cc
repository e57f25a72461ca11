// Test-only: a Stack on a TAP (link::TapEndpoint) serving the
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
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/stack.h"
#include "link/tap_endpoint.h"

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

class LinkHandler : public eventloop::Handler {
 public:
  explicit LinkHandler(link::LinkEndpoint& link) : link_(link) {}
  void OnReadable(Instant now) override { link_.OnReadable(now); }

 private:
  link::LinkEndpoint& link_;
};

int Run() {
  buffer::ChunkPool chunks(256);
  buffer::PacketPool packets(1024);
  link::TapOptions o;
  o.name = absl::GetFlag(FLAGS_tap);
  o.netns = absl::GetFlag(FLAGS_netns);
  o.mtu = absl::GetFlag(FLAGS_mtu);
  if (o.name.empty()) return Fail(absl::InvalidArgumentError("--tap"));
  auto tap = link::TapEndpoint::Open(o, chunks);
  if (!tap.ok()) return Fail(tap.status());
  std::unique_ptr<link::LinkEndpoint> link = *std::move(tap);
  const int read_fd = link->ReadFd();

  backend::GuestConfigPlan plan;
  plan.mtu = link->Capabilities().mtu;
  stack::Stack st(stack::StackOptions{}, chunks, packets);
  auto nic = st.AddNic(link.get(), o.name);
  if (!nic.ok()) return Fail(nic.status());
  for (const auto& a : {plan.gateway4, plan.dns4}) {
    if (auto s = st.AddAddress(*nic, stack::Ipv4Cidr{a, plan.prefix_len4});
        !s.ok()) {
      return Fail(s);
    }
  }
  for (const auto& a : {plan.gateway6, plan.dns6}) {
    if (auto s = st.AddAddress(*nic, stack::Ipv6Cidr{a, 64}); !s.ok()) {
      return Fail(s);
    }
  }
  auto loop_or = eventloop::EventLoop::Create();
  if (!loop_or.ok()) return Fail(loop_or.status());
  eventloop::EventLoop& loop = **loop_or;
  backend::GuestConfigServices services(st, chunks, packets, *nic, plan);
  if (auto s = services.Start(loop.Now(), nullptr); !s.ok()) return Fail(s);

  LinkHandler handler(*link);
  if (auto s = loop.Add(read_fd, eventloop::EventLoop::kReadable,
                        &handler);
      !s.ok()) {
    return Fail(s);
  }
  eventloop::PollerRef<stack::Stack> stack_poller(&st);
  eventloop::PollerRef<link::LinkEndpoint> link_poller(link.get());
  eventloop::PollerRef<backend::GuestConfigServices> services_poller(
      &services);
  loop.AddPoller(&stack_poller);
  loop.AddPoller(&link_poller);
  loop.AddPoller(&services_poller);
  loop.AddTurnEndHook([&](Instant now) { st.Flush(now); });
  auto print = [&](const char* why) {
    std::string text = absl::StrCat(st.FormatCounters(),
                                    services.FormatCounters());
    std::fprintf(stderr, "guest_config_driver: counters (%s):\n%s", why,
                 text.c_str());
    std::fflush(stderr);
  };
  if (auto s = loop.HandleSignals({SIGINT, SIGTERM, SIGUSR1},
                                  [&](int signo, Instant) {
                                    if (signo == SIGUSR1) {
                                      print("SIGUSR1");
                                    } else {
                                      loop.Stop();
                                    }
                                  });
      !s.ok()) {
    return Fail(s);
  }
  std::fprintf(stderr, "guest_config_driver: running on %s, pid %d\n",
               link->Name().c_str(), static_cast<int>(getpid()));
  std::fflush(stderr);
  const absl::Status run = loop.Run();
  print("exit");
  return run.ok() ? 0 : Fail(run);
}

}  // namespace
}  // namespace netstack::tests

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return netstack::tests::Run();
}
