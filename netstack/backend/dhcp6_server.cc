#include "netstack/backend/dhcp6_server.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/backend/guest_config_udp.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/udp.h"

namespace netstack::backend {
namespace {

constexpr uint8_t kUdp = static_cast<uint8_t>(wire::IpProtocol::kUdp);
constexpr uint16_t kOptionIaNa = 3;
constexpr uint16_t kOptionIaTa = 4;
constexpr uint16_t kOptionIaPd = 25;

}  // namespace

std::string Dhcp6Counters::Format() const {
  std::string out;
#define NETSTACK_DHCP6_LINE(f, name) \
  if (f != 0) absl::StrAppend(&out, "dhcp6." name " ", f, "\n");
  NETSTACK_DHCP6_COUNTERS(NETSTACK_DHCP6_LINE)
#undef NETSTACK_DHCP6_LINE
  return out;
}

Dhcp6Server::Dhcp6Server(stack::Stack& stack, buffer::ChunkPool& chunks,
                         buffer::PacketPool& packets, stack::NicId nic,
                         const GuestConfigPlan& plan)
    : stack_(stack),
      chunks_(chunks),
      packets_(packets),
      nic_(nic),
      plan_(plan) {
  duid_[1] = 3;  // DUID-LL
  duid_[3] = 1;  // Ethernet
  if (auto mac = stack_.NicMac(nic_)) mac->CopyTo(&duid_[4]);
}

absl::Status Dhcp6Server::Start() {
  return stack_.JoinIpv6Multicast(nic_,
                                  *wire::Ipv6Address::Parse("ff02::1:2"));
}

void Dhcp6Server::Deliver(const stack::Ipv6Datagram& d, Instant now) {
  const wire::UdpHeader udp(d.payload.bytes());
  const std::span<const uint8_t> m = udp.Payload();
  if (m.size() < 4) {
    ++counters_.truncated;
    return;
  }
  if (m[0] != kInformationRequest) {
    ++counters_.unsupported_type;
    return;
  }
  std::span<const uint8_t> client_id;
  bool have_client_id = false;
  for (size_t pos = 4; pos < m.size();) {
    if (pos + 4 > m.size()) {
      ++counters_.option_overrun;
      return;
    }
    const uint16_t code = wire::LoadBe16(&m[pos]);
    const size_t len = wire::LoadBe16(&m[pos + 2]);
    if (pos + 4 + len > m.size()) {
      ++counters_.option_overrun;
      return;
    }
    const auto value = m.subspan(pos + 4, len);
    if (code == kOptionServerId &&
        !std::ranges::equal(value, std::span<const uint8_t>(duid_))) {
      ++counters_.server_id_mismatch;
      return;
    }
    if (code == kOptionIaNa || code == kOptionIaTa || code == kOptionIaPd) {
      ++counters_.has_ia;
      return;
    }
    if (code == kOptionClientId && !have_client_id) {
      if (len > kMaxDuidLen) {
        ++counters_.client_id_too_long;
        return;
      }
      client_id = value;
      have_client_id = true;
    }
    pos += 4 + len;
  }
  ++counters_.information_requests;

  buffer::ChunkRef chunk = chunks_.Allocate();
  if (!chunk) {
    ++counters_.send_failed;
    return;
  }
  uint8_t* out = chunk->mutable_data().data();
  size_t n = 0;
  out[n++] = kReply;
  std::memcpy(out + n, &m[1], 3);  // transaction-id
  n += 3;
  auto option = [&](uint16_t code, std::span<const uint8_t> v) {
    wire::StoreBe16(out + n, code);
    wire::StoreBe16(out + n + 2, static_cast<uint16_t>(v.size()));
    if (!v.empty()) std::memcpy(out + n + 4, v.data(), v.size());
    n += 4 + v.size();
  };
  option(kOptionServerId, duid_);
  if (have_client_id) option(kOptionClientId, client_id);
  option(kOptionDnsServers, plan_.dns6.bytes);
  wire::Ipv6Repr ip;
  ip.src = *stack_.LinkLocalAddress(nic_);
  ip.dst = d.ip.src;
  ip.next_header = kUdp;
  ip.hop_limit = 64;
  const uint32_t len = static_cast<uint32_t>(n);
  const uint16_t pseudo =
      wire::Ipv6PseudoHeaderSum(ip.src, ip.dst, kUdp, 8 + len);
  buffer::PacketPtr p = MakeUdpPacket(packets_, std::move(chunk), len,
                                      kDhcp6ServerPort, udp.SrcPort(), pseudo);
  if (p == nullptr || !stack_.SendIpv6OnLink(nic_, ip, std::move(p), now)) {
    ++counters_.send_failed;
    return;
  }
  ++counters_.replies_sent;
}

}  // namespace netstack::backend
