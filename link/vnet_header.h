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
// UDP segmentation (USO; TUN_F_USO4/6, Linux 6.2): one UDP header, the
// payload cut every gso_size bytes into datagrams of their own.
inline constexpr uint8_t kGsoUdpL4 = 5;       // VIRTIO_NET_HDR_GSO_UDP_L4
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
  // gso_type UDP_L4: its gso_size (the datagrams' payload size); else 0.
  uint16_t udp_gso_size = 0;
};
// Reads the flags, gso_type and (UDP_L4) gso_size of a received header (at
// least kVnetHdrLen bytes at `hdr`).
VnetRxInfo ParseVnetHeader(const uint8_t* hdr);

// Why a frame that a guest wrote, with its virtio-net header, is refused
// (or kOk). A guest controls every byte of both, through vhost-user's TX
// queue or a TAP's PACKET_VNET_HDR writes, so nothing in them is trusted.
enum class VnetRxVerdict : uint8_t {
  kOk = 0,
  kShortHeader,       // fewer than kVnetHdrLen header bytes
  kShortFrame,        // shorter than an Ethernet header
  kFrameTooLong,      // not GSO, and longer than Ethernet + tag + MTU
  kBadFlags,          // a flag other than NEEDS_CSUM / DATA_VALID
  kBadCsum,           // NEEDS_CSUM: csum_start + csum_offset + 2 past the
                      // frame, or csum_start inside the Ethernet header
  kUnsupportedGso,    // a gso_type other than NONE, TCPV4, TCPV6 (+ ECN)
  kGsoWithoutCsum,    // TCP GSO without NEEDS_CSUM
  kGsoTypeMismatch,   // the frame is not TCP over the IP version gso_type
                      // names (EtherType, IP version, protocol, IHL,
                      // data offset), or csum_start/csum_offset do not
                      // point at its TCP checksum
  kGsoBadIpLength,    // IP length field disagrees with the frame length
  kGsoBadSize,        // gso_size 0, or a segment (IP + TCP headers +
                      // gso_size) larger than the MTU
  kGsoBadHdrLen,      // hdr_len past the end of the frame
};
inline constexpr size_t kVnetRxVerdictCount = 12;
// A short snake_case name for counters, e.g. "gso_bad_size".
const char* VnetRxVerdictName(VnetRxVerdict v);

// Checks a frame a guest sent with its virtio-net header (`hdr`, at least
// kVnetHdrLen bytes; num_buffers is not read) against what the stack and a
// host kernel rely on, for an L3 `mtu`. Pure, reads only the two spans,
// never asserts. After kOk:
//   - NEEDS_CSUM: csum_start >= 14 and csum_start + csum_offset + 2 <=
//     frame.size(), so the partial checksum lies inside the frame;
//   - GSO (TCPV4/TCPV6, | ECN): the frame is Ethernet (at most one
//     802.1Q/802.1ad tag), IPv4 with protocol TCP or IPv6 with Next Header
//     TCP as gso_type says, IP length = the rest of the frame, a complete
//     TCP header, csum_start = the TCP header's offset, csum_offset = 16,
//     1 <= gso_size and IP + TCP headers + gso_size <= mtu, hdr_len <=
//     frame.size() (hdr_len is only a hint: Linux guests send their
//     linear length, which may include payload);
//   - not GSO: frame.size() <= 14 + 4 + mtu.
// Used for vhost-user TX descriptors and for TAP / AF_PACKET input.
// `udp_l4`: also accept gso_type UDP_L4 (USO, no ECN bit), where a TAP
// offered TUN_F_USO4/6: UDP instead of TCP above, csum_offset 6, IP + UDP
// headers + gso_size <= mtu; otherwise it is kUnsupportedGso.
[[nodiscard]] VnetRxVerdict ValidateVnetRx(std::span<const uint8_t> hdr,
                                           std::span<const uint8_t> frame,
                                           uint32_t mtu, bool udp_l4 = false);

enum class VnetTxKind : uint8_t {
  // Not a GSO packet: an all-zero header (GSO_NONE, no flags); the frame
  // must carry complete checksums.
  kPlain,
  // A GSO packet: NEEDS_CSUM, TCPV4/TCPV6 (| ECN when the TCP header has
  // CWR set, as Linux marks SKB_GSO_TCP_ECN), gso_size = GsoInfo::size,
  // hdr_len, csum_start and csum_offset from the headers. A UDP one
  // (GsoType::kUdpV4/kUdpV6): UDP_L4, csum_offset 6, hdr_len through
  // the UDP header.
  kGso,
  // A GSO packet whose headers break the contract of buffer/packet.h (or
  // GSO size 0), or a partial checksum whose field lies outside
  // headers(): it must not be sent. `out` is zeroed.
  kMalformed,
  // Not GSO, but its transport checksum is partial (PartialChecksum):
  // NEEDS_CSUM with GSO_NONE, csum_start at the transport header and
  // csum_offset from the mark. The receiving kernel treats it as
  // CHECKSUM_PARTIAL: verified for local delivery, completed if it
  // forwards the frame.
  kPartialChecksum,
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
