#include "netstack/backend/backend.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "netstack/backend/dns_config.h"
#include "netstack/backend/tcp_flow.h"
#include "netstack/policy/flow_log.h"

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
    const int bits =
        std::clamp(static_cast<int>(net.prefix_len) - int(i) * 8, 0, 8);
    const uint8_t mask = static_cast<uint8_t>(0xff00 >> bits);
    a.bytes[i] = net.address.bytes[i] & mask;
  }
  a.bytes[15] |= host;
  return a;
}

// The DNS forwarder at the plan's DNS addresses, to the policy's
// upstreams or, without them, the nameservers of its resolv.conf. `dopt`
// holds its egress policy hooks (the Backend's).
absl::StatusOr<std::unique_ptr<DnsForwarder>> StartDns(
    const BackendPolicy& policy, const AddressPlan& p, const OutboundBind& bind,
    udp::UdpLayer& udp, tcp::TcpLayer& tcp, buffer::ChunkPool& chunks,
    eventloop::EventLoop& loop, DnsForwarderOptions dopt) {
  dopt.listen = {
      transport::SocketAddress{transport::IpAddress(p.dns4), kDnsPort},
      transport::SocketAddress{transport::IpAddress(p.dns6), kDnsPort}};
  dopt.upstreams = policy.dns_upstreams;
  if (dopt.upstreams.empty()) {
    auto rc = ReadResolvConf(policy.resolv_conf);
    if (!rc.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("no DNS upstream: ", rc.status().message(),
                       " (give --dns-upstream ADDR[:PORT])"));
    }
    dopt.upstreams = *std::move(rc);
  }
  dopt.bind = bind;
  return DnsForwarder::Create(udp, &tcp, chunks, loop, dopt);
}

// A new UDP or ping flow's verdict as the flow tables act on it: over the
// new-flow rate, dropped in silence (the guest resends); refused by the
// policy, ICMP administratively prohibited.
Admission AdmissionOf(const policy::Verdict& v) {
  if (v.allow) return Admission::Kind::kAllow;
  return v.reason == policy::Reason::kRateLimited ? Admission::Kind::kDrop
                                                  : Admission::Kind::kRefuse;
}

size_t ProtocolIndex(policy::Protocol protocol) {
  return protocol == policy::kTcp ? 0 : protocol == policy::kUdp ? 1 : 2;
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
      chunks_(chunks),
      busy_connects_(config.limits.busy_connect_rate,
                     config.limits.busy_connect_burst),
      busy_refusals_(config.limits.busy_connect_rate * kBusyRefusalsPerConnect,
                     config.limits.busy_connect_burst * kBusyRefusalsPerConnect),
      pins_(config.limits.max_pins),
      new_flows_(config.limits.new_flow_rate,
                 std::max<uint32_t>(1, config.limits.new_flow_burst)) {
  if (config_.policy.egress == nullptr) {
    config_.policy.egress = policy::Policy::Open();
  }
  if (const uint64_t rate = config_.limits.egress_rate; rate != 0) {
    const uint64_t burst =
        config_.limits.egress_burst != 0
            ? std::max(config_.limits.egress_burst, EgressLimiter::kMinWrite)
            : std::max<uint64_t>(64 << 10, rate / 10);
    egress_limit_ = std::make_unique<EgressLimiter>(
        rate, burst, loop_.timers(), [this](const transport::FourTuple& t) {
          if (auto it = flows_.find(t); it != flows_.end()) {
            it->second->EgressResumed();
          }
        });
  }
}

absl::StatusOr<std::unique_ptr<Backend>> Backend::Create(
    const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
    tcp::TcpLayer& tcp, eventloop::EventLoop& loop, buffer::ChunkPool& chunks) {
  std::unique_ptr<Backend> b(
      new Backend(config, stack, nic, tcp, loop, chunks));
  AddressPlan& p = b->config_.plan;
  auto ll = stack.LinkLocalAddress(nic);
  if (!ll) return absl::NotFoundError(absl::StrCat("no NIC ", nic));
  p.gateway6_link_local = *ll;
  // The stack answers as the gateway and the DNS address only.
  if (auto s =
          stack.AddAddress(nic, stack::Ipv4Cidr{p.gateway4, p.net4.prefix_len});
      !s.ok()) {
    return s;
  }
  if (auto s = stack.AddAddress(nic, stack::Ipv4Cidr{p.dns4, 32}); !s.ok()) {
    return s;
  }
  if (auto s =
          stack.AddAddress(nic, stack::Ipv6Cidr{p.gateway6, p.net6.prefix_len});
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

absl::StatusOr<std::unique_ptr<Backend>> Backend::Create(
    const BackendConfig& config, stack::Stack& stack, stack::NicId nic,
    tcp::TcpLayer& tcp, udp::UdpLayer& udp, eventloop::EventLoop& loop,
    buffer::ChunkPool& chunks, buffer::PacketPool& packets) {
  auto made = Create(config, stack, nic, tcp, loop, chunks);
  if (!made.ok()) return made.status();
  std::unique_ptr<Backend> b = *std::move(made);
  const AddressPlan& p = b->config_.plan;
  const BackendPolicy& policy = b->config_.policy;
  OutboundBind bind;
  bind.v4 = policy.outbound_bind4;
  bind.v6 = policy.outbound_bind6;
  // The stack itself: never relayed to a host socket.
  const std::vector<transport::IpAddress> self = {
      transport::IpAddress(p.gateway4), transport::IpAddress(p.dns4),
      transport::IpAddress(p.gateway6), transport::IpAddress(p.dns6),
      transport::IpAddress(p.gateway6_link_local)};

  UdpFlowOptions uo;
  uo.max_flows = b->config_.limits.max_udp_flows;
  // -u through the stack: as many again, a share of their own.
  uo.max_inbound_flows = b->config_.limits.max_udp_flows;
  uo.idle_timeout = b->config_.limits.udp_idle_timeout;
  // A turn's datagrams of a flow leave in one sendmmsg (issue #34).
  uo.coalesce = true;
  uo.bind = bind;
  uo.self_addresses = self;
  Backend* be = b.get();
  uo.admit = [be](const transport::SocketAddress& guest,
                  const transport::SocketAddress& peer, Instant now) {
    return AdmissionOf(be->JudgeEgress(policy::kUdp, guest, peer, now));
  };
  uo.egress_limit = b->egress_limit_.get();
  uo.closed = [be](const transport::SocketAddress& guest,
                   const transport::SocketAddress& peer, uint64_t out,
                   uint64_t in, Instant opened) {
    be->LogClosed(policy::kUdp, guest, peer, out, in, opened);
  };
  b->udp_flows_ =
      std::make_unique<UdpFlowTable>(stack, udp, chunks, packets, loop, uo);

  PingOptions po;
  po.bind = bind;
  po.self_addresses = self;
  po.admit = [be](const transport::SocketAddress& guest,
                  const transport::SocketAddress& peer, Instant now) {
    return AdmissionOf(be->JudgeEgress(policy::kIcmp, guest, peer, now));
  };
  po.egress_limit = b->egress_limit_.get();
  po.closed = [be](const transport::SocketAddress& guest,
                   const transport::SocketAddress& peer, uint64_t out,
                   uint64_t in, Instant opened) {
    be->LogClosed(policy::kIcmp, guest, peer, out, in, opened);
  };
  b->ping_ = std::make_unique<PingForwarder>(stack, chunks, packets, loop, po);

  if (policy.dns) {
    // The egress policy in force (read per query, so SetEgressPolicy
    // applies at once), the pins its answers make, and denied names to
    // the flow log.
    DnsForwarderOptions dopt;
    dopt.policy = [be] { return be->config_.policy.egress.get(); };
    dopt.pins = &be->pins_;
    dopt.on_denied = [be](const DnsDenial& d) { be->LogDnsDenied(d); };
    absl::StatusOr<std::unique_ptr<DnsForwarder>> dns =
        StartDns(policy, p, bind, udp, tcp, chunks, loop, std::move(dopt));
    if (!dns.ok()) return dns.status();
    b->dns_ = *std::move(dns);
  }

  GuestConfigPlan g;
  g.gateway4 = p.gateway4;
  g.prefix_len4 = p.net4.prefix_len;
  g.dns4 = p.dns4;
  g.guest4 = p.lease4;
  g.prefix6 = p.net6.address;
  g.gateway6 = p.gateway6;
  g.dns6 = p.dns6;
  g.mtu = p.mtu;
  g.dhcp4 = policy.dhcp4;
  g.ipv6 = policy.ipv6;
  b->guest_config_ =
      std::make_unique<GuestConfigServices>(stack, chunks, packets, nic, g);
  if (absl::Status s = b->guest_config_->Start(loop.Now(), &udp); !s.ok()) {
    return s;
  }
  b->guest_config_poller_ =
      std::make_unique<eventloop::PollerRef<GuestConfigServices>>(
          b->guest_config_.get());
  loop.AddPoller(b->guest_config_poller_.get());
  return b;
}

Backend::~Backend() {
  if (guest_config_poller_) loop_.RemovePoller(guest_config_poller_.get());
  guest_config_.reset();  // gives protocol 17 back to the UDP layer
  dns_.reset();
  ping_.reset();
  udp_flows_.reset();
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
  const bool gateway = dst.ip.is_v4() ? dst.ip.v4() == p.gateway4
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
  const bool dns =
      dst.ip.is_v4() ? dst.ip.v4() == p.dns4 : dst.ip.v6() == p.dns6;
  if (dns || (dst.ip.is_v6() && dst.ip.v6().IsLinkLocal())) {
    // A service of ours would have listened; nothing else lives there.
    ++counters_.tcp_refused_no_service;
    return std::nullopt;
  }
  return dst;
}

tcp::SynVerdict Backend::OnUnclaimedSyn(const transport::FourTuple& tuple,
                                        Instant now) {
  // The guest's own share: inbound flows have theirs.
  if (flows_.size() - inbound_tcp_flows_ >= config_.limits.max_tcp_flows) {
    ++counters_.tcp_refused_flow_limit;
    return tcp::SynVerdict::kReset;
  }
  auto host = HostDestination(tuple.local);
  if (!host) return tcp::SynVerdict::kReset;
  // The gateway's host loopback is host_loopback's to allow, not the
  // egress policy's (which would deny 127.0.0.1 in allowlist mode).
  const bool egress = host->ip == tuple.local.ip;
  // A refused SYN is answered at once with a RST, never left to the
  // guest's retransmissions, unless the guest floods: while the link is
  // busy (the guest sends faster than we read) and busy_refusals_ is
  // spent, it is dropped unanswered (policy_resets_shed). A RST each
  // would take the thread from the established flows; the guest's
  // retransmission gets its RST once the flood ebbs.
  // An allowed SYN's "opened" line waits for the busy check below: a shed
  // SYN opens no flow, and its line would never be closed.
  policy::Verdict v;
  if (egress) {
    v = JudgeEgress(policy::kTcp, tuple.remote, *host, now,
                    /*log_opened=*/false);
    if (!v.allow) {
      // Over the new-flow rate: no RST, which would fail the client; the
      // guest retransmits the SYN after its RTO and gets in then.
      if (v.reason == policy::Reason::kRateLimited) {
        return tcp::SynVerdict::kDrop;
      }
      if (config_.limits.busy_connect_rate != 0 && LinkBusy() &&
          !busy_refusals_.Take(now)) {
        ++counters_.policy_resets_shed;
        return tcp::SynVerdict::kDrop;
      }
      return tcp::SynVerdict::kReset;
    }
  } else if (config_.limits.new_flow_rate != 0 &&
             !TakeNewFlow(policy::kTcp, now)) {
    return tcp::SynVerdict::kDrop;  // the host's loopback is a flow too
  }
  if (config_.limits.busy_connect_rate != 0 && LinkBusy() &&
      !busy_connects_.Take(now)) {
    ++counters_.tcp_syns_shed;
    return tcp::SynVerdict::kDrop;
  }
  std::string pinned_name;
  if (egress) {
    LogVerdict(policy::kTcp, tuple.remote, *host, v, now);
    if (v.reason == policy::Reason::kPinnedName) pinned_name = std::move(v.name);
  }
  // The layer holds one SYN per tuple, but a flow outlives its guest
  // socket until the next Sweep: a SYN for the tuple of a flow whose
  // socket the layer closed in this turn (its user timeout, say) finds
  // it here. That flow is over; so is the connection the SYN belongs to.
  // (Made before the check, a TcpFlow destroyed unstarted counted an end
  // for a flow that never opened: found by tcp_flows_fuzzer.)
  if (flows_.contains(tuple)) return tcp::SynVerdict::kReset;
  auto it =
      flows_.emplace(tuple, std::make_unique<TcpFlow>(*this, tuple)).first;
  it->second->set_pinned_name(std::move(pinned_name));
  it->second->Start(*host, egress, now);
  return tcp::SynVerdict::kHold;
}

policy::Verdict Backend::JudgeEgress(policy::Protocol protocol,
                                     const transport::SocketAddress& guest,
                                     const transport::SocketAddress& dst,
                                     Instant now, bool log_opened) {
  const policy::Policy& p = *config_.policy.egress;
  policy::Verdict v = p.Decide(protocol, dst.ip, dst.port, &pins_, now);
  if (v.allow && config_.limits.new_flow_rate != 0 &&
      !TakeNewFlow(protocol, now)) {
    // Allowed, but over the rate: logged as refused, with the name kept.
    v.allow = false;
    v.reason = policy::Reason::kRateLimited;
    v.rule = -1;
  } else if (v.allow) {
    ++counters_.policy_allowed;
  } else {
    ++counters_.policy_refused[static_cast<size_t>(v.reason)];
    ++counters_.policy_refused_protocol[ProtocolIndex(protocol)];
  }
  if (!v.allow || log_opened) LogVerdict(protocol, guest, dst, v, now);
  return v;
}

void Backend::LogVerdict(policy::Protocol protocol,
                         const transport::SocketAddress& guest,
                         const transport::SocketAddress& dst,
                         const policy::Verdict& v, Instant now) {
  const policy::Policy& p = *config_.policy.egress;
  if (flow_log_ != nullptr) {
    policy::FlowEvent e;
    e.kind = v.allow ? policy::FlowEvent::Kind::kOpened
                     : policy::FlowEvent::Kind::kRefused;
    e.protocol = protocol;
    e.guest = guest;
    e.dst = dst;
    e.name = v.name;
    if (v.rule >= 0 && static_cast<size_t>(v.rule) < p.rules().size()) {
      e.rule = p.rules()[static_cast<size_t>(v.rule)].text;
    }
    e.verdict = v;
    flow_log_->Record(e, now);
  }
}

void Backend::LogClosed(policy::Protocol protocol,
                        const transport::SocketAddress& guest,
                        const transport::SocketAddress& dst,
                        uint64_t bytes_out, uint64_t bytes_in,
                        Instant opened) {
  if (flow_log_ == nullptr) return;
  const Instant now = loop_.Now();
  policy::FlowEvent e;
  e.kind = policy::FlowEvent::Kind::kClosed;
  e.protocol = protocol;
  e.guest = guest;
  e.dst = dst;
  // The verdict of the policy in force as it closes: the opened line has
  // the one that let it in; a flow a new policy reset says why it was.
  // (Only with a flow log; a flow keeps no verdict of its own.)
  const policy::Policy& p = *config_.policy.egress;
  e.verdict = p.Decide(protocol, dst.ip, dst.port, &pins_, now);
  if (e.verdict.rule >= 0 &&
      static_cast<size_t>(e.verdict.rule) < p.rules().size()) {
    e.rule = p.rules()[static_cast<size_t>(e.verdict.rule)].text;
  }
  e.name = e.verdict.name;
  if (e.name.empty()) {
    // The name it is still pinned for, under whatever rule.
    if (std::optional<std::string_view> name = pins_.Find(dst.ip, now)) {
      e.name = *name;
    }
  }
  e.bytes_out = bytes_out;
  e.bytes_in = bytes_in;
  e.duration = now - opened;
  flow_log_->Record(e, now);
}

void Backend::LogDnsDenied(const DnsDenial& d) {
  if (flow_log_ == nullptr) return;
  const Instant now = loop_.Now();
  const policy::Policy& p = *config_.policy.egress;
  policy::FlowEvent e;
  e.kind = policy::FlowEvent::Kind::kDnsDenied;
  e.protocol = d.over_tcp ? policy::kTcp : policy::kUdp;
  e.guest = d.guest;
  e.dst = d.server;
  e.name = d.qname;
  e.verdict = d.verdict;
  if (d.verdict.rule >= 0 &&
      static_cast<size_t>(d.verdict.rule) < p.rules().size()) {
    e.rule = p.rules()[static_cast<size_t>(d.verdict.rule)].text;
  }
  flow_log_->Record(e, now);
}

bool Backend::DeniedNow(policy::Protocol protocol,
                        const transport::SocketAddress& dst,
                        Instant now) const {
  return !config_.policy.egress->Decide(protocol, dst.ip, dst.port, &pins_, now)
              .allow;
}

size_t Backend::SetEgressPolicy(std::shared_ptr<const policy::Policy> egress) {
  config_.policy.egress =
      egress != nullptr ? std::move(egress) : policy::Policy::Open();
  const Instant now = loop_.Now();
  size_t reset = 0;
  for (auto& [tuple, flow] : flows_) {
    if (!flow->egress() || flow->ended()) continue;
    bool denied = DeniedNow(policy::kTcp, flow->host_destination(), now);
    if (denied && !flow->pinned_name().empty()) {
      // Admitted by a pin that may have expired since: judged by its name
      // under the new policy, as if freshly pinned.
      policy::PinTable one(1);
      one.Pin(flow->host_destination().ip, flow->pinned_name(),
              absl::Hours(1), now);
      denied = !config_.policy.egress
                    ->Decide(policy::kTcp, flow->host_destination().ip,
                             flow->host_destination().port, &one, now)
                    .allow;
    }
    if (denied) {
      flow->ResetForPolicy();  // frees it at the next Sweep
      ++reset;
    }
  }
  if (udp_flows_) {
    reset += udp_flows_->CloseOutbound(
        [&](const transport::SocketAddress&,
            const transport::SocketAddress& peer) {
          return DeniedNow(policy::kUdp, peer, now);
        });
  }
  if (ping_) {
    reset += ping_->CloseIf([&](const transport::SocketAddress&,
                                const transport::SocketAddress& peer) {
      return DeniedNow(policy::kIcmp, peer, now);
    });
  }
  counters_.policy_reset_on_change += reset;
  return reset;
}

absl::Status Backend::AdoptInboundTcp(
    int host_fd, const transport::SocketAddress& source,
    const transport::SocketAddress& guest,
    std::shared_ptr<InboundTcpCounts> counts) {
  ++counters_.tcp_inbound_opened;
  auto refuse = [&](absl::Status s) {
    ++counters_.tcp_inbound_refused;
    const linger l{1, 0};
    (void)setsockopt(host_fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    (void)close(host_fd);
    return s;
  };
  // Clients of a published port fill a share of their own: once they
  // took the guest's, and its own connect() got RST.
  if (inbound_tcp_flows_ >= config_.limits.max_inbound_tcp_flows) {
    ++counters_.tcp_refused_inbound_limit;
    return refuse(
        absl::ResourceExhaustedError("inbound TCP flow limit reached"));
  }
  std::unique_ptr<tcp::TcpSocket> sock = tcp_.Open(guest.ip.family());
  sock->SetTransparent(true);
  if (absl::Status s = sock->Bind(source); !s.ok()) return refuse(s);
  if (absl::Status s = sock->Connect(guest); !s.ok()) return refuse(s);
  const transport::FourTuple tuple{sock->local_address(), guest};
  auto [it, inserted] =
      flows_.emplace(tuple, std::make_unique<TcpFlow>(*this, tuple));
  if (!inserted) {
    sock->Abort();
    return refuse(absl::AlreadyExistsError(tuple.local.ToString()));
  }
  ++inbound_tcp_flows_;
  if (counts) it->second->CountInbound(std::move(counts));
  it->second->StartInbound(host_fd, std::move(sock));
  return absl::OkStatus();
}

bool Backend::TakeNewFlow(policy::Protocol protocol, Instant now) {
  if (new_flows_.Take(1, now)) return true;
  ++counters_.limit_new_flows_dropped[ProtocolIndex(protocol)];
  return false;
}

bool Backend::LinkBusy() const {
  std::optional<link::LinkStats> s = stack_.NicLinkStats(nic_);
  return s && s->rx_batch_limit_hits != limit_hits_at_sweep_;
}

void Backend::Sweep(Instant now) {
  if (std::optional<link::LinkStats> s = stack_.NicLinkStats(nic_)) {
    limit_hits_at_sweep_ = s->rx_batch_limit_hits;
  }
  // Lookups ignore expired pins already; this only gives their memory
  // back, so once a second is plenty.
  if (now >= next_pin_expiry_) {
    pins_.Expire(now);
    next_pin_expiry_ = now + absl::Seconds(1);
  }
  // Flows marked while sweeping wait for the next turn.
  sweep_batch_.swap(sweep_);
  for (const transport::FourTuple& t : sweep_batch_) {
    auto it = flows_.find(t);
    if (it == flows_.end()) continue;
    if (it->second->Sweep(now)) {
      if (it->second->inbound()) --inbound_tcp_flows_;
      flows_.erase(it);
    }
  }
  sweep_batch_.clear();
  // Chunks are freed only by what a turn did (acks, ended flows), so this
  // is the place to look again. A flow that finds no room re-queues.
  if (!chunk_waiters_.empty() && host_arena_.HasRoom(TcpFlow::kMinRecvRoom)) {
    chunk_waiters_batch_.swap(chunk_waiters_);
    for (const transport::FourTuple& t : chunk_waiters_batch_) {
      auto it = flows_.find(t);
      if (it != flows_.end()) it->second->ChunkAvailable();
    }
    chunk_waiters_batch_.clear();
  }
}

uint64_t Backend::tcp_buffered_bytes() const {
  uint64_t n = 0;
  for (const auto& [tuple, flow] : flows_) n += flow->buffered_bytes();
  return n;
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
      c.tcp_refused_mapped_destination, "\n", "backend.tcp_syns_shed ",
      c.tcp_syns_shed, "\n", "backend.tcp_bytes_guest_to_host ",
      c.tcp_bytes_guest_to_host, "\n", "backend.tcp_bytes_host_to_guest ",
      c.tcp_bytes_host_to_guest, "\n", "backend.tcp_chunk_waits ",
      c.tcp_chunk_waits, "\n", "backend.tcp_inbound_opened ",
      c.tcp_inbound_opened, "\n", "backend.tcp_inbound_established ",
      c.tcp_inbound_established, "\n", "backend.tcp_inbound_refused ",
      c.tcp_inbound_refused, "\n", "backend.tcp_refused_inbound_limit ",
      c.tcp_refused_inbound_limit, "\n", "backend.tcp_inbound_flows_open ",
      inbound_tcp_flows_, "\n", "backend.tcp_chunk_waiting ",
      chunk_waiters_.size(), "\n", "backend.tcp_buffered_bytes ",
      tcp_buffered_bytes(), "\n");
  for (size_t i = 0; i < policy::kReasonCount; ++i) {
    // Deny reasons only: the allowed ones are never refused.
    static constexpr bool kAllows[] = {
#define NETSTACK_POLICY_ALLOWS(e, name, allow) allow,
        NETSTACK_POLICY_REASONS(NETSTACK_POLICY_ALLOWS)
#undef NETSTACK_POLICY_ALLOWS
    };
    // Rate-limited flows are the limits' (backend.limit.*), not the
    // policy's.
    if (kAllows[i] ||
        i == static_cast<size_t>(policy::Reason::kRateLimited)) {
      continue;
    }
    const std::string_view reason =
        policy::ReasonName(static_cast<policy::Reason>(i));
    absl::StrAppend(&out, "backend.policy.refused.",
                    absl::string_view(reason.data(), reason.size()), " ",
                    c.policy_refused[i], "\n");
  }
  absl::StrAppend(
      &out, "backend.policy.refused_tcp ", c.policy_refused_protocol[0], "\n",
      "backend.policy.refused_udp ", c.policy_refused_protocol[1], "\n",
      "backend.policy.refused_icmp ", c.policy_refused_protocol[2], "\n",
      "backend.policy.allowed ", c.policy_allowed, "\n",
      "backend.policy.reset_on_change ", c.policy_reset_on_change, "\n",
      "backend.policy.resets_shed ", c.policy_resets_shed, "\n",
      "backend.policy.pins ", pins_.size(), "\n",
      "backend.policy.pins_evicted ", pins_.evicted(), "\n");
  {
    const std::array<uint64_t, 3>& d = c.limit_new_flows_dropped;
    const EgressLimitCounters e =
        egress_limit_ ? egress_limit_->counters() : EgressLimitCounters{};
    absl::StrAppend(
        &out, "backend.limit.new_flows_dropped ", d[0] + d[1] + d[2], "\n",
        "backend.limit.new_flows_dropped_tcp ", d[0], "\n",
        "backend.limit.new_flows_dropped_udp ", d[1], "\n",
        "backend.limit.new_flows_dropped_icmp ", d[2], "\n",
        "backend.limit.egress_bytes ", e.bytes, "\n",
        "backend.limit.egress_waits ", e.waits, "\n",
        "backend.limit.egress_bytes_delayed ", e.bytes_delayed, "\n",
        "backend.limit.egress_datagrams_dropped ", e.datagrams_dropped, "\n",
        "backend.limit.egress_bytes_dropped ", e.bytes_dropped, "\n",
        "backend.limit.egress_waiting ",
        egress_limit_ ? egress_limit_->waiting() : 0, "\n");
  }
  for (size_t i = 0; i < c.tcp_ends.size(); ++i) {
    absl::StrAppend(&out, "backend.tcp_end.",
                    FlowEndName(static_cast<FlowEnd>(i)), " ", c.tcp_ends[i],
                    "\n");
  }
  if (udp_flows_) {
    absl::StrAppend(&out, "backend.udp.flows_open ", udp_flows_->size(), "\n",
                    udp_flows_->counters().Format());
  }
  if (ping_) {
    absl::StrAppend(&out, "backend.ping.flows_open ", ping_->size(), "\n",
                    ping_->counters().Format());
  }
  if (dns_) absl::StrAppend(&out, dns_->counters().Format());
  if (guest_config_) {
    // "dhcp4.x 1" lines (non-zero ones only) become "backend.dhcp4.x 1".
    for (absl::string_view line : absl::StrSplit(
             guest_config_->FormatCounters(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(&out, "backend.", line, "\n");
    }
  }
  return out;
}

}  // namespace netstack::backend
