#include "netstack/backend/backend.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/backend/tcp_flow.h"

namespace netstack::backend {
namespace {

wire::Ipv4Address Host4(const stack::Ipv4Cidr& net, uint32_t host) {
  const uint32_t mask =
      net.prefix_len == 0 ? 0 : 0xffffffffu << (32 - net.prefix_len);
  return wire::Ipv4Address::FromU32((net.address.ToU32() & mask) | host);
}

wire::Ipv6Address Host6(const stack::Ipv6Cidr& net, uint8_t host) {
  wire::Ipv6Address a;
  for (size_t i = 0; i < 16; ++i) {
    const int bits = std::clamp(static_cast<int>(net.prefix_len) - int(i) * 8, 0, 8);
    const uint8_t mask = static_cast<uint8_t>(0xff00 >> bits);
    a.bytes[i] = net.address.bytes[i] & mask;
  }
  a.bytes[15] |= host;
  return a;
}

}  // namespace

const char* FlowEndName(FlowEnd e) {
  switch (e) {
#define NETSTACK_CASE(en, name) \
  case FlowEnd::en:             \
    return name;
    NETSTACK_TCP_FLOW_ENDS(NETSTACK_CASE)
#undef NETSTACK_CASE
    case FlowEnd::kCount:
      break;
  }
  return "?";
}

absl::StatusOr<AddressPlan> AddressPlan::ForNetworks(
    const stack::Ipv4Cidr& net4, const stack::Ipv6Cidr& net6, uint32_t mtu) {
  // Host 100 must fit, and not be the broadcast address.
  if (net4.prefix_len > 24) {
    return absl::InvalidArgumentError(absl::StrCat(
        "IPv4 network ", stack::ToString(net4),
        " is too small: it needs hosts .2, .3 and .100 (at most /24)"));
  }
  if (net6.prefix_len > 120) {
    return absl::InvalidArgumentError(
        absl::StrCat("IPv6 prefix ", stack::ToString(net6), " is too long"));
  }
  if (mtu < 1280 || mtu > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("MTU ", mtu, " out of range [1280, 65535]"));
  }
  AddressPlan p;
  p.net4 = stack::Ipv4Cidr{Host4(net4, 0), net4.prefix_len};
  p.gateway4 = Host4(net4, 2);
  p.dns4 = Host4(net4, 3);
  p.lease4 = Host4(net4, 100);
  p.net6 = stack::Ipv6Cidr{Host6(net6, 0), net6.prefix_len};
  p.gateway6 = Host6(net6, 2);
  p.dns6 = Host6(net6, 3);
  p.mtu = mtu;
  return p;
}

AddressPlan AddressPlan::Default() {
  return *ForNetworks(*stack::ParseIpv4Cidr("10.0.2.0/24"),
                      *stack::ParseIpv6Cidr("fd00::/64"));
}

Backend::Backend(const BackendConfig& config, stack::Stack& stack,
                 stack::NicId nic, tcp::TcpLayer& tcp,
                 eventloop::EventLoop& loop, buffer::ChunkPool& chunks)
    : config_(config),
      stack_(stack),
      nic_(nic),
      tcp_(tcp),
      loop_(loop),
      chunks_(chunks) {}

absl::StatusOr<std::unique_ptr<Backend>> Backend::Create(
    const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
    tcp::TcpLayer& tcp, eventloop::EventLoop& loop,
    buffer::ChunkPool& chunks) {
  std::unique_ptr<Backend> b(
      new Backend(config, stack, nic, tcp, loop, chunks));
  AddressPlan& p = b->config_.plan;
  auto ll = stack.LinkLocalAddress(nic);
  if (!ll) return absl::NotFoundError(absl::StrCat("no NIC ", nic));
  p.gateway6_link_local = *ll;
  // The stack answers as the gateway and the DNS address only.
  if (auto s = stack.AddAddress(nic, stack::Ipv4Cidr{p.gateway4, p.net4.prefix_len});
      !s.ok()) {
    return s;
  }
  if (auto s = stack.AddAddress(nic, stack::Ipv4Cidr{p.dns4, 32}); !s.ok()) {
    return s;
  }
  if (auto s = stack.AddAddress(nic, stack::Ipv6Cidr{p.gateway6, p.net6.prefix_len});
      !s.ok()) {
    return s;
  }
  if (auto s = stack.AddAddress(nic, stack::Ipv6Cidr{p.dns6, 128}); !s.ok()) {
    return s;
  }
  stack::GatewayOptions g;
  g.guest4 = p.lease4;
  g.guest6_prefix = p.net6;
  if (auto s = stack.SetGateway(nic, g); !s.ok()) return s;
  tcp.SetSynHandler(b.get());
  return b;
}

Backend::~Backend() {
  tcp_.SetSynHandler(nullptr);
  flows_.clear();  // each flow aborts both sides and closes its fd
}

std::optional<transport::SocketAddress> Backend::HostDestination(
    const transport::SocketAddress& dst) {
  const AddressPlan& p = config_.plan;
  if (dst.ip.is_v6()) {
    const auto& b = dst.ip.v6().bytes;
    bool mapped = b[10] == 0xff && b[11] == 0xff;
    for (size_t i = 0; i < 10; ++i) mapped = mapped && b[i] == 0;
    if (mapped) {
      ++counters_.tcp_refused_mapped_destination;
      return std::nullopt;
    }
  }
  const bool gateway =
      dst.ip.is_v4() ? dst.ip.v4() == p.gateway4
                     : (dst.ip.v6() == p.gateway6 ||
                        dst.ip.v6() == p.gateway6_link_local);
  if (gateway) {
    if (!config_.policy.host_loopback) {
      ++counters_.tcp_refused_host_loopback;
      return std::nullopt;
    }
    return transport::SocketAddress{
        dst.ip.is_v4()
            ? transport::IpAddress(*wire::Ipv4Address::Parse("127.0.0.1"))
            : transport::IpAddress(*wire::Ipv6Address::Parse("::1")),
        dst.port};
  }
  const bool dns = dst.ip.is_v4() ? dst.ip.v4() == p.dns4
                                  : dst.ip.v6() == p.dns6;
  if (dns || (dst.ip.is_v6() && dst.ip.v6().IsLinkLocal())) {
    // A service of ours would have listened; nothing else lives there.
    ++counters_.tcp_refused_no_service;
    return std::nullopt;
  }
  return dst;
}

bool Backend::OnUnclaimedSyn(const transport::FourTuple& tuple, Instant now) {
  if (flows_.size() >= config_.limits.max_tcp_flows) {
    ++counters_.tcp_refused_flow_limit;
    return false;
  }
  auto host = HostDestination(tuple.local);
  if (!host) return false;
  auto [it, inserted] =
      flows_.emplace(tuple, std::make_unique<TcpFlow>(*this, tuple));
  if (!inserted) return false;  // the layer holds one SYN per tuple
  it->second->Start(*host, now);
  return true;
}

void Backend::Sweep(Instant now) {
  // Flows marked while sweeping wait for the next turn.
  sweep_batch_.swap(sweep_);
  for (const transport::FourTuple& t : sweep_batch_) {
    auto it = flows_.find(t);
    if (it == flows_.end()) continue;
    if (it->second->Sweep(now)) flows_.erase(it);
  }
  sweep_batch_.clear();
}

std::string Backend::FormatCounters() const {
  const BackendCounters& c = counters_;
  std::string out = absl::StrCat(
      "backend.tcp_flows_opened ", c.tcp_flows_opened, "\n",
      "backend.tcp_flows_established ", c.tcp_flows_established, "\n",
      "backend.tcp_flows_closed ", c.tcp_flows_closed, "\n",
      "backend.tcp_flows_open ", flows_.size(), "\n",
      "backend.tcp_host_fds_open ", c.tcp_host_fds_open, "\n",
      "backend.tcp_refused_flow_limit ", c.tcp_refused_flow_limit, "\n",
      "backend.tcp_refused_host_loopback ", c.tcp_refused_host_loopback, "\n",
      "backend.tcp_refused_no_service ", c.tcp_refused_no_service, "\n",
      "backend.tcp_refused_mapped_destination ",
      c.tcp_refused_mapped_destination, "\n",
      "backend.tcp_bytes_guest_to_host ", c.tcp_bytes_guest_to_host, "\n",
      "backend.tcp_bytes_host_to_guest ", c.tcp_bytes_host_to_guest, "\n");
  for (size_t i = 0; i < c.tcp_ends.size(); ++i) {
    absl::StrAppend(&out, "backend.tcp_end.",
                    FlowEndName(static_cast<FlowEnd>(i)), " ", c.tcp_ends[i],
                    "\n");
  }
  return out;
}

}  // namespace netstack::backend
