// The virtio-net header (virtio spec 1.x section 5.1.6, <linux/virtio_net.h>)
// that TAP (IFF_VNET_HDR) and AF_PACKET (PACKET_VNET_HDR) put in front of
// every frame: what the host kernel says about a received frame, and what
// we ask of it for a frame we send (host GSO).
//
//   offset  size  field
//        0     1  flags        NEEDS_CSUM (1), DATA_VALID (2)
//        1     1  gso_type     NONE (0), TCPV4 (1), UDP (3), TCPV6 (4),
//                              UDP_L4 (5), | ECN (0x80)
//        2     2  hdr_len      bytes of Ethernet + IP + TCP headers
//        4     2  gso_size     payload bytes per wire packet (the MSS)
//        6     2  csum_start   offset of the TCP header in the frame
//        8     2  csum_offset  offset of the checksum field in it (16)
//       10     2  num_buffers  only in the 12-byte form (MRG_RXBUF / 1.0)
//
// Byte order of the 16-bit fields: little-endian. That is virtio 1.0's
// order, and legacy virtio's "guest native" order on a little-endian host,
// which is what AF_PACKET always uses (vio_le()). A TAP endpoint that
// sends GSO frames also sets TUNSETVNETLE, so the TAP agrees on any host.
//
// <linux/virtio_net.h> is not valid C++ (a field named `class`), so the
// values are repeated here from the spec. Fields are read and written
// byte by byte, never through a struct.
#ifndef NETSTACK_LINK_VNET_HEADER_H_
#define NETSTACK_LINK_VNET_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "netstack/buffer/packet.h"

namespace netstack::link {

// 10 bytes, or 12 with num_buffers (VIRTIO_NET_F_MRG_RXBUF / virtio 1.0).
// TAP lets us choose the size (TUNSETVNETHDRSZ); AF_PACKET always uses 10.
inline constexpr size_t kVnetHdrLen = 10;
inline constexpr size_t kVnetHdrMrgLen = 12;

namespace vnet {
inline constexpr size_t kFlagsOffset = 0;
inline constexpr size_t kGsoTypeOffset = 1;
inline constexpr size_t kHdrLenOffset = 2;
inline constexpr size_t kGsoSizeOffset = 4;
inline constexpr size_t kCsumStartOffset = 6;
inline constexpr size_t kCsumOffsetOffset = 8;

inline constexpr uint8_t kFlagNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
inline constexpr uint8_t kFlagDataValid = 2;  // VIRTIO_NET_HDR_F_DATA_VALID
inline constexpr uint8_t kGsoNone = 0;        // VIRTIO_NET_HDR_GSO_NONE
inline constexpr uint8_t kGsoTcpV4 = 1;       // VIRTIO_NET_HDR_GSO_TCPV4
inline constexpr uint8_t kGsoTcpV6 = 4;       // VIRTIO_NET_HDR_GSO_TCPV6
inline constexpr uint8_t kGsoEcn = 0x80;      // VIRTIO_NET_HDR_GSO_ECN
// The TCP checksum field sits 16 bytes into the TCP header (RFC 9293 3.1).
inline constexpr uint16_t kTcpChecksumOffset = 16;

inline uint16_t LoadLe16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (uint16_t{p[1]} << 8));
}
inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
}  // namespace vnet

// What a received header says.
struct VnetRxInfo {
  bool checksum_partial = false;   // VIRTIO_NET_HDR_F_NEEDS_CSUM
  bool checksum_verified = false;  // VIRTIO_NET_HDR_F_DATA_VALID
  bool gso = false;                // gso_type != VIRTIO_NET_HDR_GSO_NONE
};
// Reads the flags and gso_type bytes of a received header (at least 2
// bytes at `hdr`).
VnetRxInfo ParseVnetHeader(const uint8_t* hdr);

enum class VnetTxKind : uint8_t {
  // Not a GSO packet: an all-zero header (GSO_NONE, no flags); the frame
  // must carry complete checksums.
  kPlain,
  // A GSO packet: NEEDS_CSUM, TCPV4/TCPV6 (| ECN when the TCP header has
  // CWR set, as Linux marks SKB_GSO_TCP_ECN), gso_size = GsoInfo::size,
  // hdr_len, csum_start and csum_offset from the headers.
  kGso,
  // A GSO packet whose headers break the contract of buffer/packet.h (or
  // GSO size 0): it must not be sent. `out` is zeroed.
  kMalformed,
};

// Writes the kVnetHdrLen-byte header that sends `p` through a vnet-header
// fd. The 12-byte form's num_buffers is not written (the kernel ignores it
// on transmit; keep it zero).
//
// For a GSO packet the headers() buffer is parsed once, checking what the
// kernel relies on: Ethernet with at most one 802.1Q/802.1ad tag, the
// EtherType matching the GSO type, IPv4 (version 4, header length >= 20,
// protocol TCP, Total Length = the rest of the frame) or IPv6 (version 6,
// Next Header TCP, Payload Length = the rest of the frame), and a TCP
// header (data offset >= 20) that ends inside headers(). Payload bytes
// are not read. Never asserts on packet contents.
[[nodiscard]] VnetTxKind FillVnetHeader(const buffer::PacketBuffer& p,
                                        std::span<uint8_t, kVnetHdrLen> out);

}  // namespace netstack::link

#endif  // NETSTACK_LINK_VNET_HEADER_H_
