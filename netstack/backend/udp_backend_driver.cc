// A test-only driver for the backend's UDP flows, ping and DNS forwarder:
// a Stack on a TAP in the guest's namespace, with a TcpLayer and UdpLayer,
// and the three services on top. udp_backend_interop_test.py runs it
// inside its "host" namespace. Until the backend core lands, the stack
// is given the host-side addresses the guest talks to as extra addresses
// (--extra), since the stack accepts packets for its own addresses only.
//
//   udp_backend_driver --tap NAME --netns G --addr CIDR... --extra IP...
//       --self IP... --dns-listen ADDR:PORT... --dns-upstream ADDR[:PORT]...
//
// Prints "ready" once serving, and its counters (`name value`) on SIGTERM
// or SIGINT, then exits 0.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "link/tap_endpoint.h"
#include "netstack/backend/dns_config.h"
#include "netstack/backend/dns_forwarder.h"
#include "netstack/backend/ping_flows.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/packet.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/stack/stack.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/transport/notifier.h"
#include "netstack/udp/udp_layer.h"

namespace netstack::backend {
namespace {

struct Args {
  std::string tap, netns;
  std::vector<std::string> addrs, extras, selfs, dns_listen, dns_upstreams;
  uint32_t mtu = 1500;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "udp_backend_driver: %s\n", what.c_str());
  return 2;
}

class LinkHandler : public eventloop::Handler {
 public:
  explicit LinkHandler(link::LinkEndpoint& l) : l_(l) {}
  void OnReadable(Instant now) override { l_.OnReadable(now); }

 private:
  link::LinkEndpoint& l_;
};

int Run(const Args& a) {
  buffer::ChunkPool chunks(2048);
  buffer::PacketPool packets(16384);
  link::TapOptions to;
  to.name = a.tap;
  to.netns = a.netns;
  to.mtu = a.mtu;
  auto tap = link::TapEndpoint::Open(to, chunks);
  if (!tap.ok()) return Fail(std::string(tap.status().message()));
  stack::Stack st(stack::StackOptions{}, chunks, packets);
  auto nic = st.AddNic(tap->get(), a.tap);
  if (!nic.ok()) return Fail(std::string(nic.status().message()));
  for (const std::string& s : a.addrs) {
    absl::Status r = absl::InvalidArgumentError("bad --addr " + s);
    if (auto c4 = stack::ParseIpv4Cidr(s)) r = st.AddAddress(*nic, *c4);
    if (auto c6 = stack::ParseIpv6Cidr(s)) r = st.AddAddress(*nic, *c6);
    if (!r.ok()) return Fail(std::string(r.message()));
  }
  for (const std::string& s : a.extras) {
    auto ip = transport::IpAddress::Parse(s);
    if (!ip) return Fail("bad --extra " + s);
    absl::Status r =
        ip->is_v4() ? st.AddAddress(*nic, stack::Ipv4Cidr{ip->v4(), 32})
                    : st.AddAddress(*nic, stack::Ipv6Cidr{ip->v6(), 128});
    if (!r.ok()) return Fail(std::string(r.message()));
  }
  std::vector<transport::IpAddress> selfs;
  for (const std::string& s : a.selfs) {
    auto ip = transport::IpAddress::Parse(s);
    if (!ip) return Fail("bad --self " + s);
    selfs.push_back(*ip);
  }

  transport::Notifier notifier;
  tcp::TcpLayerOptions tcp_options;
  tcp_options.seed = 0x5eed;
  tcp::TcpLayer tcp(st, chunks, packets, notifier, tcp_options);
  udp::UdpLayer udp(st, chunks, packets, notifier, 0x5eed1);
  auto loop_or = eventloop::EventLoop::Create();
  if (!loop_or.ok()) return Fail(std::string(loop_or.status().message()));
  eventloop::EventLoop& loop = **loop_or;
  LinkHandler handler(**tap);
  if (auto s = loop.Add((*tap)->ReadFd(), eventloop::EventLoop::kReadable,
                        &handler);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  eventloop::PollerRef<stack::Stack> stack_poller(&st);
  loop.AddPoller(&stack_poller);

  UdpFlowOptions uo;
  uo.self_addresses = selfs;
  UdpFlowTable flows(st, udp, chunks, packets, loop, uo);
  PingOptions po;
  po.self_addresses = selfs;
  PingForwarder ping(st, chunks, packets, loop, po);
  DnsForwarderOptions dopt;
  for (const std::string& s : a.dns_listen) {
    auto sa = transport::SocketAddress::Parse(s);
    if (!sa) return Fail("bad --dns-listen " + s);
    dopt.listen.push_back(*sa);
  }
  for (const std::string& s : a.dns_upstreams) {
    auto u = ParseDnsUpstream(s);
    if (!u.ok()) return Fail(std::string(u.status().message()));
    dopt.upstreams.push_back(*u);
  }
  std::unique_ptr<DnsForwarder> dns;
  if (!dopt.listen.empty()) {
    auto d = DnsForwarder::Create(udp, &tcp, chunks, loop, dopt);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    dns = *std::move(d);
  }

  // Keep the loop awake while callbacks are pending or TCP has timers.
  class TransportPoller : public eventloop::Poller {
   public:
    TransportPoller(const tcp::TcpLayer& t, const transport::Notifier& n)
        : t_(t), n_(n) {}
    Instant NextDeadline() const override {
      return n_.empty() ? t_.NextDeadline() : absl::InfinitePast();
    }
    void Poll(Instant) override {}

   private:
    const tcp::TcpLayer& t_;
    const transport::Notifier& n_;
  } transport_poller(tcp, notifier);
  loop.AddPoller(&transport_poller);
  loop.AddTurnEndHook([&](Instant now) {
    notifier.Dispatch();
    tcp.Poll(now);
    st.Flush(now);
  });
  const int sigs[] = {SIGTERM, SIGINT};
  if (auto s = loop.HandleSignals(sigs, [&](int, Instant) { loop.Stop(); });
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::printf("ready\n");
  std::fflush(stdout);
  absl::Status r = loop.Run();
  std::string text = st.FormatCounters();
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  text += udp.counters().Format();
  text += flows.counters().Format();
  text += ping.counters().Format();
  if (dns) text += dns->counters().Format();
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
  loop.RemovePoller(&transport_poller);
  loop.RemovePoller(&stack_poller);
  return r.ok() ? 0 : 1;
}

}  // namespace
}  // namespace netstack::backend

int main(int argc, char** argv) {
  netstack::backend::Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "udp_backend_driver: %s needs a value\n", argv[i]);
      return 2;
    }
    const std::string v = argv[++i];
    if (flag == "--tap") a.tap = v;
    else if (flag == "--netns") a.netns = v;
    else if (flag == "--mtu") a.mtu = static_cast<uint32_t>(std::stoul(v));
    else if (flag == "--addr") a.addrs.push_back(v);
    else if (flag == "--extra") a.extras.push_back(v);
    else if (flag == "--self") a.selfs.push_back(v);
    else if (flag == "--dns-listen") a.dns_listen.push_back(v);
    else if (flag == "--dns-upstream") a.dns_upstreams.push_back(v);
    else {
      std::fprintf(stderr, "udp_backend_driver: unknown flag %s\n", argv[i - 1]);
      return 2;
    }
  }
  return netstack::backend::Run(a);
}
