// A test-only driver for the backend's UDP flows, ping and DNS forwarder:
// a runtime (netstack/runtime/runtime.h: a Stack on a TAP in the guest's
// namespace, with TCP and UDP, no Backend) and the three services on top. udp_backend_interop_test.py runs it
// inside its "host" namespace. Until the backend core lands, the stack
// is given the host-side addresses the guest talks to as extra addresses
// (--extra), since the stack accepts packets for its own addresses only.
//
//   udp_backend_driver --tap NAME --netns G --addr CIDR... --extra IP...
//       --self IP... --dns-listen ADDR:PORT... --dns-upstream ADDR[:PORT]...
//       [--host-gso N]
//
// --host-gso N: the TAP with host GSO (virtio-net headers, TSO and USO
// offered; N is gso_max_size), as netstackd runs it.
//
// Prints "ready" once serving, and its counters (`name value`) on SIGTERM
// or SIGINT, then exits 0.
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "netstack/backend/dns_config.h"
#include "netstack/backend/dns_forwarder.h"
#include "netstack/backend/ping_flows.h"
#include "netstack/backend/udp_flows.h"
#include "netstack/runtime/runtime.h"
#include "netstack/stack/route_table.h"

namespace netstack::backend {
namespace {

struct Args {
  std::string tap, netns;
  std::vector<std::string> addrs, extras, selfs, dns_listen, dns_upstreams;
  uint32_t mtu = 1500;
  uint32_t host_gso = 0;
};

int Fail(const std::string& what) {
  std::fprintf(stderr, "udp_backend_driver: %s\n", what.c_str());
  return 2;
}

int Run(const Args& a) {
  runtime::RuntimeOptions o;
  o.chunks = 2048;
  o.packets = 16384;
  o.host.tap_name = a.tap;
  o.host.netns = a.netns;
  o.host.mtu = a.mtu;
  o.host.host_gso_max_size = a.host_gso;
  o.nic_name = a.tap;
  for (const std::string& s : a.addrs) {
    if (auto c4 = stack::ParseIpv4Cidr(s)) {
      o.addrs4.push_back(*c4);
    } else if (auto c6 = stack::ParseIpv6Cidr(s)) {
      o.addrs6.push_back(*c6);
    } else {
      return Fail("bad --addr " + s);
    }
  }
  for (const std::string& s : a.extras) {
    auto ip = transport::IpAddress::Parse(s);
    if (!ip) return Fail("bad --extra " + s);
    if (ip->is_v4()) {
      o.addrs4.push_back(stack::Ipv4Cidr{ip->v4(), 32});
    } else {
      o.addrs6.push_back(stack::Ipv6Cidr{ip->v6(), 128});
    }
  }
  std::vector<transport::IpAddress> selfs;
  for (const std::string& s : a.selfs) {
    auto ip = transport::IpAddress::Parse(s);
    if (!ip) return Fail("bad --self " + s);
    selfs.push_back(*ip);
  }
  o.tcp.seed = 0x5eed;
  o.udp_seed = 0x5eed1;
  auto rt_or = runtime::Runtime::Create(std::move(o));
  if (!rt_or.ok()) return Fail(std::string(rt_or.status().message()));
  runtime::Runtime& rt = **rt_or;
  buffer::ChunkPool& chunks = rt.chunks();
  buffer::PacketPool& packets = rt.packets();
  eventloop::EventLoop& loop = rt.loop();

  UdpFlowOptions uo;
  uo.self_addresses = selfs;
  uo.coalesce = true;  // as the Backend runs them
  UdpFlowTable flows(rt.stack(), rt.udp(), chunks, packets, loop, uo);
  PingOptions po;
  po.self_addresses = selfs;
  PingForwarder ping(rt.stack(), chunks, packets, loop, po);
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
    auto d = DnsForwarder::Create(rt.udp(), &rt.tcp(), chunks, loop, dopt);
    if (!d.ok()) return Fail(std::string(d.status().message()));
    dns = *std::move(d);
  }

  const int sigs[] = {SIGTERM, SIGINT};
  if (auto s = loop.HandleSignals(sigs, [&](int, Instant) { rt.Stop(); });
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  std::printf("ready\n");
  std::fflush(stdout);
  absl::Status r = rt.Run();
  std::string text = rt.stack().FormatCounters();
  if (!text.empty() && text.back() != '\n') text.push_back('\n');
  text += rt.udp().counters().Format();
  text += flows.counters().Format();
  text += ping.counters().Format();
  if (dns) text += dns->counters().Format();
  std::fputs(text.c_str(), stdout);
  std::fflush(stdout);
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
    else if (flag == "--host-gso") {
      a.host_gso = static_cast<uint32_t>(std::stoul(v));
    }
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
