#include "netstack/backend/dhcp4_server.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/backend/guest_config_udp.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/udp.h"

namespace netstack::backend {
namespace {

constexpr uint8_t kUdp = static_cast<uint8_t>(wire::IpProtocol::kUdp);
using T = Dhcp4MessageType;

size_t Index(T t) { return static_cast<size_t>(t); }

}  // namespace

std::string Dhcp4Counters::Format() const {
  std::string out;
  for (size_t i = 1; i < kDhcp4MessageTypes; ++i) {
    const char* name = Dhcp4MessageTypeName(static_cast<T>(i));
    if (received[i] != 0) {
      absl::StrAppend(&out, "dhcp4.received.", name, " ", received[i], "\n");
    }
    if (sent[i] != 0) {
      absl::StrAppend(&out, "dhcp4.sent.", name, " ", sent[i], "\n");
    }
  }
  for (size_t i = 1; i < parse_errors.size(); ++i) {
    if (parse_errors[i] != 0) {
      absl::StrAppend(&out, "dhcp4.drop.",
                      Dhcp4ParseErrorName(static_cast<Dhcp4ParseError>(i)),
                      " ", parse_errors[i], "\n");
    }
  }
#define NETSTACK_DHCP4_DROP_LINE(f, name) \
  if (f != 0) absl::StrAppend(&out, "dhcp4.drop." name " ", f, "\n");
  NETSTACK_DHCP4_DROPS(NETSTACK_DHCP4_DROP_LINE)
#undef NETSTACK_DHCP4_DROP_LINE
  if (leases_granted != 0) {
    absl::StrAppend(&out, "dhcp4.leases_granted ", leases_granted, "\n");
  }
  if (leases_released != 0) {
    absl::StrAppend(&out, "dhcp4.leases_released ", leases_released, "\n");
  }
  return out;
}

Dhcp4Server::Dhcp4Server(stack::Stack& stack, buffer::ChunkPool& chunks,
                         buffer::PacketPool& packets, stack::NicId nic,
                         const GuestConfigPlan& plan)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      nic_(nic),
      plan_(plan) {}

std::optional<wire::MacAddress> Dhcp4Server::LeaseHolder(Instant now) const {
  if (lease_mac_ && now < lease_expires_) return lease_mac_;
  return std::nullopt;
}

bool Dhcp4Server::LeaseFreeFor(const wire::MacAddress& mac,
                               Instant now) const {
  const auto holder = LeaseHolder(now);
  return !holder || *holder == mac;
}

void Dhcp4Server::Deliver(const stack::Ipv4Datagram& d, Instant now) {
  const wire::UdpHeader udp(d.payload.bytes());
  const auto body = udp.Payload();
  Dhcp4Message m;
  const Dhcp4ParseError e = Dhcp4Message::Parse(body, m);
  if (e != Dhcp4ParseError::kOk) {
    ++counters_.parse_errors[static_cast<size_t>(e)];
    return;
  }
  if (m.op != static_cast<uint8_t>(Dhcp4Op::kBootRequest)) {
    ++counters_.not_request_op;
    return;
  }
  if (!m.giaddr.IsZero()) {
    ++counters_.relayed;
    return;
  }
  if (m.chaddr.IsMulticast() || m.chaddr.IsZero()) {
    // We would unicast to it, or bind the lease to it.
    ++counters_.bad_chaddr;
    return;
  }
  ++counters_.received[Index(m.type)];
  switch (m.type) {
    case T::kDiscover:
      return HandleDiscover(m, now);
    case T::kRequest:
      return HandleRequest(m, now);
    case T::kInform:
      return HandleInform(m, now);
    case T::kDecline:
    case T::kRelease:
      return FreeLease(m);
    case T::kOffer:
    case T::kAck:
    case T::kNak:
      ++counters_.server_message_type;
      return;
  }
}

void Dhcp4Server::HandleDiscover(const Dhcp4Message& m, Instant now) {
  if (!LeaseFreeFor(m.chaddr, now)) {
    ++counters_.address_taken;
    return;
  }
  Send(m, Reply(m, T::kOffer, /*lease=*/true), now);
}

void Dhcp4Server::HandleRequest(const Dhcp4Message& m, Instant now) {
  // RFC 2131 4.3.2: SELECTING names a server id; INIT-REBOOT a requested
  // address; RENEWING/REBINDING only ciaddr.
  if (m.server_id && *m.server_id != plan_.gateway4) {
    ++counters_.request_other_server;
    return;
  }
  wire::Ipv4Address wanted = m.requested_ip ? *m.requested_ip : m.ciaddr;
  if (m.server_id && !m.requested_ip) wanted = wire::Ipv4Address();
  if (wanted != plan_.guest4 || !LeaseFreeFor(m.chaddr, now)) {
    if (wanted == plan_.guest4) ++counters_.address_taken;
    return Send(m, Reply(m, T::kNak, /*lease=*/false), now);
  }
  lease_mac_ = m.chaddr;
  lease_expires_ = now + absl::Seconds(plan_.lease_seconds);
  ++counters_.leases_granted;
  Send(m, Reply(m, T::kAck, /*lease=*/true), now);
}

void Dhcp4Server::HandleInform(const Dhcp4Message& m, Instant now) {
  if (m.ciaddr.IsZero()) {
    ++counters_.inform_without_ciaddr;
    return;
  }
  Send(m, Reply(m, T::kAck, /*lease=*/false), now);
}

void Dhcp4Server::FreeLease(const Dhcp4Message& m) {
  // RELEASE names the address in ciaddr, DECLINE in option 50.
  const wire::Ipv4Address addr =
      m.type == T::kDecline && m.requested_ip ? *m.requested_ip : m.ciaddr;
  if (!lease_mac_ || *lease_mac_ != m.chaddr || addr != plan_.guest4) {
    ++counters_.release_not_ours;
    return;
  }
  lease_mac_.reset();
  lease_expires_ = absl::InfinitePast();
  ++counters_.leases_released;
}

Dhcp4Message Dhcp4Server::Reply(const Dhcp4Message& req, T type,
                                bool lease) const {
  Dhcp4Message r;
  r.op = static_cast<uint8_t>(Dhcp4Op::kBootReply);
  r.xid = req.xid;
  r.flags = req.flags;
  r.giaddr = req.giaddr;
  r.chaddr = req.chaddr;
  r.type = type;
  r.server_id = plan_.gateway4;
  if (type == T::kNak) return r;  // RFC 2131 table 3: nothing else
  r.ciaddr = req.ciaddr;
  if (lease) {
    r.yiaddr = plan_.guest4;
    r.lease_time = plan_.lease_seconds;
    r.renewal_time = plan_.lease_seconds / 2;                  // T1
    r.rebinding_time = static_cast<uint32_t>(
        uint64_t{plan_.lease_seconds} * 7 / 8);                // T2
  }
  const uint32_t mask =
      plan_.prefix_len4 == 0 ? 0 : ~uint32_t{0} << (32 - plan_.prefix_len4);
  r.subnet_mask = wire::Ipv4Address::FromU32(mask);
  r.router = plan_.gateway4;
  r.dns = plan_.dns4;
  if (plan_.mtu >= 576) {
    r.mtu = static_cast<uint16_t>(std::min<uint32_t>(plan_.mtu, 65535));
  }
  return r;
}

void Dhcp4Server::Send(const Dhcp4Message& req, const Dhcp4Message& reply,
                       Instant now) {
  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    ++counters_.send_failed;
    return;
  }
  const uint32_t len =
      static_cast<uint32_t>(reply.Emit(chunk->mutable_data()));
  wire::Ipv4Repr ip;
  ip.src = plan_.gateway4;
  ip.protocol = kUdp;
  wire::MacAddress mac = req.chaddr;
  if (reply.type == T::kNak || req.broadcast()) {
    ip.dst = wire::Ipv4Address::FromU32(0xffffffffu);
    mac = wire::MacAddress::Broadcast();
  } else if (!req.ciaddr.IsZero()) {
    ip.dst = req.ciaddr;
  } else {
    ip.dst = reply.yiaddr;
  }
  const uint16_t pseudo =
      wire::Ipv4PseudoHeaderSum(ip.src, ip.dst, kUdp, 8 + len);
  buffer::PacketPtr p = MakeUdpPacket(packets_, std::move(chunk), len,
                                      kDhcp4ServerPort, kDhcp4ClientPort,
                                      pseudo);
  if (p == nullptr || !stack_.SendIpv4ToMac(nic_, ip, std::move(p), mac, now)) {
    ++counters_.send_failed;
    return;
  }
  ++counters_.sent[Index(reply.type)];
}

}  // namespace netstack::backend
