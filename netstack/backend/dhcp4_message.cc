#include "netstack/backend/dhcp4_message.h"

#include <algorithm>
#include <cstring>

#include "netstack/wire/bytes.h"

namespace netstack::backend {
namespace {

// RFC 2132 option codes.
constexpr uint8_t kPad = 0;
constexpr uint8_t kSubnetMask = 1;
constexpr uint8_t kRouter = 3;
constexpr uint8_t kDns = 6;
constexpr uint8_t kMtu = 26;
constexpr uint8_t kRequestedIp = 50;
constexpr uint8_t kLeaseTime = 51;
constexpr uint8_t kMessageType = 53;
constexpr uint8_t kServerId = 54;
constexpr uint8_t kMaxMessageSize = 57;
constexpr uint8_t kRenewalTime = 58;
constexpr uint8_t kRebindingTime = 59;
constexpr uint8_t kEnd = 255;

constexpr size_t kChaddrOffset = 28;

wire::Ipv4Address LoadIpv4(const uint8_t* p) {
  wire::Ipv4Address a;
  std::memcpy(a.bytes.data(), p, 4);
  return a;
}

void StoreIpv4(uint8_t* p, const wire::Ipv4Address& a) {
  std::memcpy(p, a.bytes.data(), 4);
}

// Reads one option into `out`; false: a length this server cannot accept.
bool ReadOption(uint8_t code, std::span<const uint8_t> v, Dhcp4Message& out,
                bool& have_type, bool& bad_type) {
  auto addr = [&](std::optional<wire::Ipv4Address>& f, bool list) {
    if (list ? (v.size() < 4 || v.size() % 4 != 0) : v.size() != 4) {
      return false;
    }
    if (!f) f = LoadIpv4(v.data());
    return true;
  };
  auto u32 = [&](std::optional<uint32_t>& f) {
    if (v.size() != 4) return false;
    if (!f) f = wire::LoadBe32(v.data());
    return true;
  };
  auto u16 = [&](std::optional<uint16_t>& f) {
    if (v.size() != 2) return false;
    if (!f) f = wire::LoadBe16(v.data());
    return true;
  };
  switch (code) {
    case kSubnetMask: return addr(out.subnet_mask, false);
    case kRouter: return addr(out.router, true);
    case kDns: return addr(out.dns, true);
    case kMtu: return u16(out.mtu);
    case kRequestedIp: return addr(out.requested_ip, false);
    case kLeaseTime: return u32(out.lease_time);
    case kServerId: return addr(out.server_id, false);
    case kMaxMessageSize: return u16(out.max_message_size);
    case kRenewalTime: return u32(out.renewal_time);
    case kRebindingTime: return u32(out.rebinding_time);
    case kMessageType:
      if (v.size() != 1) return false;
      if (!have_type) {
        have_type = true;
        if (v[0] < 1 || v[0] >= kDhcp4MessageTypes) {
          bad_type = true;
        } else {
          out.type = static_cast<Dhcp4MessageType>(v[0]);
        }
      }
      return true;
    default:
      return true;  // not ours to read (RFC 2131 4.3: ignore)
  }
}

}  // namespace

const char* Dhcp4MessageTypeName(Dhcp4MessageType t) {
  switch (t) {
    case Dhcp4MessageType::kDiscover: return "discover";
    case Dhcp4MessageType::kOffer: return "offer";
    case Dhcp4MessageType::kRequest: return "request";
    case Dhcp4MessageType::kDecline: return "decline";
    case Dhcp4MessageType::kAck: return "ack";
    case Dhcp4MessageType::kNak: return "nak";
    case Dhcp4MessageType::kRelease: return "release";
    case Dhcp4MessageType::kInform: return "inform";
  }
  return "unknown";
}

const char* Dhcp4ParseErrorName(Dhcp4ParseError e) {
  switch (e) {
    case Dhcp4ParseError::kOk: return "ok";
#define NETSTACK_DHCP4_NAME(e, name) \
  case Dhcp4ParseError::e:           \
    return name;
    NETSTACK_DHCP4_PARSE_ERRORS(NETSTACK_DHCP4_NAME)
#undef NETSTACK_DHCP4_NAME
  }
  return "unknown";
}

Dhcp4ParseError Dhcp4Message::Parse(std::span<const uint8_t> b,
                                    Dhcp4Message& out) {
  if (b.size() < kOptionsOffset) return Dhcp4ParseError::kTruncated;
  if (b[1] != 1) return Dhcp4ParseError::kBadHtype;  // Ethernet (RFC 1700)
  if (b[2] != 6) return Dhcp4ParseError::kBadHlen;
  if (wire::LoadBe32(&b[kFixedLen]) != kMagicCookie) {
    return Dhcp4ParseError::kBadMagicCookie;
  }
  out = Dhcp4Message{};
  out.op = b[0];
  out.hops = b[3];
  out.xid = wire::LoadBe32(&b[4]);
  out.secs = wire::LoadBe16(&b[8]);
  out.flags = wire::LoadBe16(&b[10]);
  out.ciaddr = LoadIpv4(&b[12]);
  out.yiaddr = LoadIpv4(&b[16]);
  out.siaddr = LoadIpv4(&b[20]);
  out.giaddr = LoadIpv4(&b[24]);
  std::memcpy(out.chaddr.bytes.data(), &b[kChaddrOffset], 6);
  bool have_type = false;
  bool bad_type = false;
  size_t pos = kOptionsOffset;
  // Options run to End or to the end of the message (RFC 2131 4.1 lets a
  // client omit padding; a missing End is tolerated as most servers do).
  while (pos < b.size()) {
    const uint8_t code = b[pos];
    if (code == kEnd) break;
    if (code == kPad) {
      ++pos;
      continue;
    }
    if (pos + 1 >= b.size()) return Dhcp4ParseError::kOptionOverrun;
    const size_t len = b[pos + 1];
    if (pos + 2 + len > b.size()) return Dhcp4ParseError::kOptionOverrun;
    if (!ReadOption(code, b.subspan(pos + 2, len), out, have_type,
                    bad_type)) {
      return Dhcp4ParseError::kBadOptionLength;
    }
    pos += 2 + len;
  }
  if (!have_type) return Dhcp4ParseError::kMissingMessageType;
  if (bad_type) return Dhcp4ParseError::kUnknownMessageType;
  return Dhcp4ParseError::kOk;
}

size_t Dhcp4Message::BufferLen() const {
  size_t n = kOptionsOffset + 3;  // cookie, message type
  if (subnet_mask) n += 6;
  if (router) n += 6;
  if (dns) n += 6;
  if (mtu) n += 4;
  if (requested_ip) n += 6;
  if (lease_time) n += 6;
  if (server_id) n += 6;
  if (max_message_size) n += 4;
  if (renewal_time) n += 6;
  if (rebinding_time) n += 6;
  n += 1;  // end
  return std::max(n, kMinEmitLen);
}

size_t Dhcp4Message::Emit(std::span<uint8_t> out) const {
  const size_t len = BufferLen();
  std::fill(out.begin(), out.begin() + len, 0);
  uint8_t* p = out.data();
  p[0] = op;
  p[1] = 1;
  p[2] = 6;
  p[3] = hops;
  wire::StoreBe32(&p[4], xid);
  wire::StoreBe16(&p[8], secs);
  wire::StoreBe16(&p[10], flags);
  StoreIpv4(&p[12], ciaddr);
  StoreIpv4(&p[16], yiaddr);
  StoreIpv4(&p[20], siaddr);
  StoreIpv4(&p[24], giaddr);
  std::memcpy(&p[kChaddrOffset], chaddr.bytes.data(), 6);
  wire::StoreBe32(&p[kFixedLen], kMagicCookie);
  size_t pos = kOptionsOffset;
  auto opt = [&](uint8_t code, uint8_t n) {
    p[pos] = code;
    p[pos + 1] = n;
    pos += 2;
    return &p[pos];
  };
  *opt(kMessageType, 1) = static_cast<uint8_t>(type);
  ++pos;
  // Server id first after the type, as RFC 2131 table 3 lists it.
  auto put_addr = [&](uint8_t code, const std::optional<wire::Ipv4Address>& a) {
    if (!a) return;
    StoreIpv4(opt(code, 4), *a);
    pos += 4;
  };
  auto put_u32 = [&](uint8_t code, const std::optional<uint32_t>& v) {
    if (!v) return;
    wire::StoreBe32(opt(code, 4), *v);
    pos += 4;
  };
  auto put_u16 = [&](uint8_t code, const std::optional<uint16_t>& v) {
    if (!v) return;
    wire::StoreBe16(opt(code, 2), *v);
    pos += 2;
  };
  put_addr(kServerId, server_id);
  put_u32(kLeaseTime, lease_time);
  put_u32(kRenewalTime, renewal_time);
  put_u32(kRebindingTime, rebinding_time);
  put_addr(kSubnetMask, subnet_mask);
  put_addr(kRouter, router);
  put_addr(kDns, dns);
  put_u16(kMtu, mtu);
  put_addr(kRequestedIp, requested_ip);
  put_u16(kMaxMessageSize, max_message_size);
  p[pos++] = kEnd;
  return len;
}

}  // namespace netstack::backend
