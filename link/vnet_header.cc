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
constexpr uint8_t kProtoUdp = 17;
constexpr size_t kUdpHeaderLen = 8;
constexpr uint16_t kUdpChecksumOffset = 6;  // RFC 768
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
  size_t hdr_len = 0;   // Ethernet + IP + TCP (or UDP)
  uint16_t csum_offset = vnet::kTcpChecksumOffset;
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
  // USO: the same with UDP above IP (virtio-net GSO_UDP_L4, either family).
  const bool udp =
      type == buffer::GsoType::kUdpV4 || type == buffer::GsoType::kUdpV6;
  const uint8_t proto = udp ? kProtoUdp : kProtoTcp;
  if (type == buffer::GsoType::kTcpV4 || type == buffer::GsoType::kUdpV4) {
    // RFC 791 section 3.1.
    if (ethertype != kTypeIpv4 || h.size() < l3 + kIpv4MinHeaderLen) {
      return out;
    }
    const uint8_t* ip = &h[l3];
    const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
    if ((ip[0] >> 4) != 4 || ihl < kIpv4MinHeaderLen || ip[9] != proto ||
        wire::LoadBe16(ip + 2) != frame_len - l3) {
      return out;
    }
    l4 = l3 + ihl;
    out.gso_type = udp ? vnet::kGsoUdpL4 : vnet::kGsoTcpV4;
  } else if (type == buffer::GsoType::kTcpV6 ||
             type == buffer::GsoType::kUdpV6) {
    // RFC 8200 section 3.
    if (ethertype != kTypeIpv6 || h.size() < l3 + kIpv6HeaderLen) return out;
    const uint8_t* ip = &h[l3];
    if ((ip[0] >> 4) != 6 || ip[6] != proto ||
        wire::LoadBe16(ip + 4) != frame_len - l3 - kIpv6HeaderLen) {
      return out;
    }
    l4 = l3 + kIpv6HeaderLen;
    out.gso_type = udp ? vnet::kGsoUdpL4 : vnet::kGsoTcpV6;
  } else {
    return out;
  }
  if (udp) {
    // RFC 768: an 8-byte header whose Length covers the super-datagram,
    // the last bytes of the headers.
    if (h.size() != l4 + kUdpHeaderLen ||
        wire::LoadBe16(&h[l4 + 4]) != frame_len - l4) {
      return out;
    }
    out.l4_start = l4;
    out.hdr_len = l4 + kUdpHeaderLen;
    out.csum_offset = kUdpChecksumOffset;
    out.ok = true;
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

// The TCP super-frame layout ValidateVnetRx demands of a guest's GSO
// frame; returns kOk and fills *l4 (TCP header offset) and *l3_hdrs (IP +
// TCP header bytes), or the reason.
VnetRxVerdict ParseGuestGsoFrame(std::span<const uint8_t> f, uint8_t type,
                                 size_t* l4_out, size_t* hdrs_out) {
  if (f.size() < kEthHeaderLen) return VnetRxVerdict::kShortFrame;
  size_t l3 = kEthHeaderLen;
  uint16_t ethertype = wire::LoadBe16(&f[12]);
  if (ethertype == kTypeVlan || ethertype == kTypeQinQ) {
    if (f.size() < kEthHeaderLen + kVlanTagLen) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    l3 += kVlanTagLen;
    ethertype = wire::LoadBe16(&f[16]);
  }
  const size_t l3_len = f.size() - l3;
  size_t l4 = 0;
  if (type == vnet::kGsoTcpV4) {
    // RFC 791 section 3.1.
    if (ethertype != kTypeIpv4 || l3_len < kIpv4MinHeaderLen) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    const uint8_t* ip = &f[l3];
    const size_t ihl = size_t{ip[0] & 0x0fu} * 4;
    if ((ip[0] >> 4) != 4 || ihl < kIpv4MinHeaderLen || ip[9] != kProtoTcp ||
        ihl > l3_len) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    if (wire::LoadBe16(ip + 2) != l3_len) return VnetRxVerdict::kGsoBadIpLength;
    l4 = l3 + ihl;
  } else {
    // RFC 8200 section 3. Extension headers are refused: the Next Header
    // must be TCP itself.
    if (ethertype != kTypeIpv6 || l3_len < kIpv6HeaderLen) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    const uint8_t* ip = &f[l3];
    if ((ip[0] >> 4) != 6 || ip[6] != kProtoTcp) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    if (wire::LoadBe16(ip + 4) != l3_len - kIpv6HeaderLen) {
      return VnetRxVerdict::kGsoBadIpLength;
    }
    l4 = l3 + kIpv6HeaderLen;
  }
  // RFC 9293 section 3.1: Data Offset in the high nibble of byte 12.
  if (f.size() < l4 + kTcpMinHeaderLen) return VnetRxVerdict::kGsoTypeMismatch;
  const size_t doff = static_cast<size_t>(f[l4 + 12] >> 4) * 4;
  if (doff < kTcpMinHeaderLen || f.size() < l4 + doff) {
    return VnetRxVerdict::kGsoTypeMismatch;
  }
  *l4_out = l4;
  *hdrs_out = l4 + doff - l3;
  return VnetRxVerdict::kOk;
}

// The same for a UDP_L4 (USO) super-frame: UDP over IPv4 or IPv6 (no
// extension headers), the IP length matching the frame; *l4_out gets the
// UDP header's offset, *hdrs_out IP + UDP header bytes.
VnetRxVerdict ParseGuestUsoFrame(std::span<const uint8_t> f, size_t* l4_out,
                                 size_t* hdrs_out) {
  size_t l3 = kEthHeaderLen;
  uint16_t ethertype = wire::LoadBe16(&f[12]);
  if (ethertype == kTypeVlan || ethertype == kTypeQinQ) {
    if (f.size() < kEthHeaderLen + kVlanTagLen) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    l3 += kVlanTagLen;
    ethertype = wire::LoadBe16(&f[16]);
  }
  const size_t l3_len = f.size() - l3;
  const uint8_t* ip = &f[l3];
  size_t ip_hdr = 0;
  if (ethertype == kTypeIpv4 && l3_len >= kIpv4MinHeaderLen) {
    ip_hdr = size_t{ip[0] & 0x0fu} * 4;
    if ((ip[0] >> 4) != 4 || ip_hdr < kIpv4MinHeaderLen || ip_hdr > l3_len ||
        ip[9] != kProtoUdp) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    if (wire::LoadBe16(ip + 2) != l3_len) return VnetRxVerdict::kGsoBadIpLength;
  } else if (ethertype == kTypeIpv6 && l3_len >= kIpv6HeaderLen) {
    ip_hdr = kIpv6HeaderLen;
    if ((ip[0] >> 4) != 6 || ip[6] != kProtoUdp) {
      return VnetRxVerdict::kGsoTypeMismatch;
    }
    if (wire::LoadBe16(ip + 4) != l3_len - kIpv6HeaderLen) {
      return VnetRxVerdict::kGsoBadIpLength;
    }
  } else {
    return VnetRxVerdict::kGsoTypeMismatch;
  }
  if (l3_len < ip_hdr + kUdpHeaderLen) return VnetRxVerdict::kGsoTypeMismatch;
  *l4_out = l3 + ip_hdr;
  *hdrs_out = ip_hdr + kUdpHeaderLen;
  return VnetRxVerdict::kOk;
}

}  // namespace

const char* VnetRxVerdictName(VnetRxVerdict v) {
  switch (v) {
    case VnetRxVerdict::kOk: return "ok";
    case VnetRxVerdict::kShortHeader: return "short_header";
    case VnetRxVerdict::kShortFrame: return "short_frame";
    case VnetRxVerdict::kFrameTooLong: return "frame_too_long";
    case VnetRxVerdict::kBadFlags: return "bad_flags";
    case VnetRxVerdict::kBadCsum: return "bad_csum";
    case VnetRxVerdict::kUnsupportedGso: return "unsupported_gso";
    case VnetRxVerdict::kGsoWithoutCsum: return "gso_without_csum";
    case VnetRxVerdict::kGsoTypeMismatch: return "gso_type_mismatch";
    case VnetRxVerdict::kGsoBadIpLength: return "gso_bad_ip_length";
    case VnetRxVerdict::kGsoBadSize: return "gso_bad_size";
    case VnetRxVerdict::kGsoBadHdrLen: return "gso_bad_hdr_len";
  }
  return "unknown";
}

VnetRxVerdict ValidateVnetRx(std::span<const uint8_t> hdr,
                             std::span<const uint8_t> frame, uint32_t mtu,
                             bool udp_l4) {
  if (hdr.size() < kVnetHdrLen) return VnetRxVerdict::kShortHeader;
  if (frame.size() < kEthHeaderLen) return VnetRxVerdict::kShortFrame;
  const uint8_t flags = hdr[vnet::kFlagsOffset];
  if ((flags & ~(vnet::kFlagNeedsCsum | vnet::kFlagDataValid)) != 0) {
    return VnetRxVerdict::kBadFlags;
  }
  const bool needs_csum = (flags & vnet::kFlagNeedsCsum) != 0;
  const size_t csum_start = vnet::LoadLe16(&hdr[vnet::kCsumStartOffset]);
  const size_t csum_offset = vnet::LoadLe16(&hdr[vnet::kCsumOffsetOffset]);
  if (needs_csum && (csum_start < kEthHeaderLen ||
                     csum_start + csum_offset + 2 > frame.size())) {
    return VnetRxVerdict::kBadCsum;
  }
  const uint8_t gso_type = hdr[vnet::kGsoTypeOffset] & ~vnet::kGsoEcn;
  if (gso_type == vnet::kGsoNone) {
    if (frame.size() > kEthHeaderLen + kVlanTagLen + size_t{mtu}) {
      return VnetRxVerdict::kFrameTooLong;
    }
    return VnetRxVerdict::kOk;
  }
  const bool uso = udp_l4 && hdr[vnet::kGsoTypeOffset] == vnet::kGsoUdpL4;
  if (gso_type != vnet::kGsoTcpV4 && gso_type != vnet::kGsoTcpV6 && !uso) {
    return VnetRxVerdict::kUnsupportedGso;
  }
  if (!needs_csum) return VnetRxVerdict::kGsoWithoutCsum;
  size_t l4 = 0;
  size_t l3_hdrs = 0;
  const VnetRxVerdict layout =
      uso ? ParseGuestUsoFrame(frame, &l4, &l3_hdrs)
          : ParseGuestGsoFrame(frame, gso_type, &l4, &l3_hdrs);
  if (layout != VnetRxVerdict::kOk) return layout;
  // The UDP checksum sits 6 bytes into its header (RFC 768).
  if (csum_start != l4 || csum_offset != (uso ? kUdpChecksumOffset
                                              : vnet::kTcpChecksumOffset)) {
    return VnetRxVerdict::kGsoTypeMismatch;
  }
  const size_t gso_size = vnet::LoadLe16(&hdr[vnet::kGsoSizeOffset]);
  if (gso_size == 0 || l3_hdrs + gso_size > mtu) {
    return VnetRxVerdict::kGsoBadSize;
  }
  if (vnet::LoadLe16(&hdr[vnet::kHdrLenOffset]) > frame.size()) {
    return VnetRxVerdict::kGsoBadHdrLen;
  }
  return VnetRxVerdict::kOk;
}

VnetRxInfo ParseVnetHeader(const uint8_t* hdr) {
  VnetRxInfo info;
  const uint8_t flags = hdr[vnet::kFlagsOffset];
  const uint8_t gso_type = hdr[vnet::kGsoTypeOffset];
  info.checksum_partial = (flags & vnet::kFlagNeedsCsum) != 0;
  info.checksum_verified = (flags & vnet::kFlagDataValid) != 0;
  info.gso = (gso_type & ~vnet::kGsoEcn) != vnet::kGsoNone;
  if (gso_type == vnet::kGsoUdpL4) {
    info.udp_gso_size = vnet::LoadLe16(hdr + vnet::kGsoSizeOffset);
  }
  return info;
}

VnetTxKind FillVnetHeader(const buffer::PacketBuffer& p,
                          std::span<uint8_t, kVnetHdrLen> out) {
  std::fill(out.begin(), out.end(), uint8_t{0});
  if (!p.is_gso()) {
    if (!p.needs_checksum()) return VnetTxKind::kPlain;
    // The transport header is the tail of headers(), behind at least an
    // Ethernet header; its checksum field lies inside it.
    const buffer::PartialChecksum c = p.partial_checksum();
    const size_t hdrs = p.headers().size();
    if (hdrs < c.l4_header_len + size_t{14} ||
        size_t{c.offset} + 2 > c.l4_header_len) {
      return VnetTxKind::kMalformed;
    }
    out[vnet::kFlagsOffset] = vnet::kFlagNeedsCsum;
    vnet::StoreLe16(out.data() + vnet::kCsumStartOffset,
                    static_cast<uint16_t>(hdrs - c.l4_header_len));
    vnet::StoreLe16(out.data() + vnet::kCsumOffsetOffset, c.offset);
    return VnetTxKind::kPartialChecksum;
  }
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
  vnet::StoreLe16(h + vnet::kCsumOffsetOffset, l.csum_offset);
  return VnetTxKind::kGso;
}

}  // namespace netstack::link
