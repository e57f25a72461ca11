#include "link/vnet_header.h"

#include <algorithm>

#include "netstack/wire/bytes.h"

namespace netstack::link {
namespace {

constexpr size_t kEthHeaderLen = 14;
constexpr size_t kVlanTagLen = 4;
constexpr uint16_t kTypeVlan = 0x8100;   // IEEE 802.1Q
constexpr uint16_t kTypeQinQ = 0x88a8;   // IEEE 802.1ad
constexpr uint16_t kTypeIpv4 = 0x0800;
constexpr uint16_t kTypeIpv6 = 0x86dd;
constexpr uint8_t kProtoTcp = 6;
constexpr size_t kIpv4MinHeaderLen = 20;
constexpr size_t kIpv6HeaderLen = 40;
constexpr size_t kTcpMinHeaderLen = 20;
constexpr uint8_t kTcpCwr = 0x80;  // flags byte 13 (RFC 3168 section 23.2)

// Offsets of the headers in one GSO frame; nullopt-like `ok` = false when
// the headers break the contract.
struct GsoLayout {
  bool ok = false;
  uint8_t gso_type = vnet::kGsoNone;
  size_t l4_start = 0;  // = csum_start
  size_t hdr_len = 0;   // Ethernet + IP + TCP
};

GsoLayout ParseGsoHeaders(std::span<const uint8_t> h, size_t frame_len,
                          buffer::GsoType type) {
  GsoLayout out;
  if (h.size() < kEthHeaderLen) return out;
  size_t l3 = kEthHeaderLen;
  uint16_t ethertype = wire::LoadBe16(&h[12]);
  if (ethertype == kTypeVlan || ethertype == kTypeQinQ) {
    if (h.size() < kEthHeaderLen + kVlanTagLen) return out;
    l3 += kVlanTagLen;
    ethertype = wire::LoadBe16(&h[16]);
  }
  size_t l4 = 0;
  if (type == buffer::GsoType::kTcpV4) {
    // RFC 791 section 3.1.
    if (ethertype != kTypeIpv4 || h.size() < l3 + kIpv4MinHeaderLen) {
      return out;
    }
    const uint8_t* ip = &h[l3];
    const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
    if ((ip[0] >> 4) != 4 || ihl < kIpv4MinHeaderLen || ip[9] != kProtoTcp ||
        wire::LoadBe16(ip + 2) != frame_len - l3) {
      return out;
    }
    l4 = l3 + ihl;
    out.gso_type = vnet::kGsoTcpV4;
  } else if (type == buffer::GsoType::kTcpV6) {
    // RFC 8200 section 3.
    if (ethertype != kTypeIpv6 || h.size() < l3 + kIpv6HeaderLen) return out;
    const uint8_t* ip = &h[l3];
    if ((ip[0] >> 4) != 6 || ip[6] != kProtoTcp ||
        wire::LoadBe16(ip + 4) != frame_len - l3 - kIpv6HeaderLen) {
      return out;
    }
    l4 = l3 + kIpv6HeaderLen;
    out.gso_type = vnet::kGsoTcpV6;
  } else {
    return out;
  }
  // RFC 9293 section 3.1: Data Offset in the high nibble of byte 12.
  if (h.size() < l4 + kTcpMinHeaderLen) return out;
  const size_t doff = static_cast<size_t>(h[l4 + 12] >> 4) * 4;
  if (doff < kTcpMinHeaderLen || h.size() < l4 + doff) return out;
  if ((h[l4 + 13] & kTcpCwr) != 0) out.gso_type |= vnet::kGsoEcn;
  out.l4_start = l4;
  out.hdr_len = l4 + doff;
  out.ok = true;
  return out;
}

}  // namespace

VnetRxInfo ParseVnetHeader(const uint8_t* hdr) {
  VnetRxInfo info;
  const uint8_t flags = hdr[vnet::kFlagsOffset];
  const uint8_t gso_type = hdr[vnet::kGsoTypeOffset];
  info.checksum_partial = (flags & vnet::kFlagNeedsCsum) != 0;
  info.checksum_verified = (flags & vnet::kFlagDataValid) != 0;
  info.gso = (gso_type & ~vnet::kGsoEcn) != vnet::kGsoNone;
  return info;
}

VnetTxKind FillVnetHeader(const buffer::PacketBuffer& p,
                          std::span<uint8_t, kVnetHdrLen> out) {
  std::fill(out.begin(), out.end(), uint8_t{0});
  if (!p.is_gso()) return VnetTxKind::kPlain;
  if (p.gso().size == 0) return VnetTxKind::kMalformed;
  const GsoLayout l = ParseGsoHeaders(p.headers().data(), p.size(),
                                      p.gso().type);
  // Offsets travel in 16-bit fields; a header area that large is
  // impossible with 16-bit IP lengths, but check rather than truncate.
  if (!l.ok || l.hdr_len > 0xffff) return VnetTxKind::kMalformed;
  uint8_t* h = out.data();
  h[vnet::kFlagsOffset] = vnet::kFlagNeedsCsum;
  h[vnet::kGsoTypeOffset] = l.gso_type;
  vnet::StoreLe16(h + vnet::kHdrLenOffset, static_cast<uint16_t>(l.hdr_len));
  vnet::StoreLe16(h + vnet::kGsoSizeOffset, p.gso().size);
  vnet::StoreLe16(h + vnet::kCsumStartOffset,
                  static_cast<uint16_t>(l.l4_start));
  vnet::StoreLe16(h + vnet::kCsumOffsetOffset, vnet::kTcpChecksumOffset);
  return VnetTxKind::kGso;
}

}  // namespace netstack::link
