// TCP header (RFC 9293 section 3.1) with the options of RFC 9293 section
// 3.2 (EOL, NOP, MSS), RFC 7323 (Window Scale, Timestamps) and RFC 2018
// (SACK-Permitted, SACK).
//
//    0                   1                   2                   3
//    0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |          Source Port          |       Destination Port        |  0
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                        Sequence Number                        |  4
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                    Acknowledgment Number                      |  8
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |  Data |     |A|C|E|U|A|P|R|S|F|                               |
//   | Offset| Rsv |E|W|C|R|C|S|S|Y|I|            Window             | 12
//   |       |     | |R|E|G|K|H|T|N|N|                               |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |           Checksum            |         Urgent Pointer        | 16
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                    Options (0-40 bytes)                       | 20
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//   |                             data                              |
//   +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//
// The AE bit (byte 12, lowest bit) is the former ECN-nonce NS bit of RFC
// 3540, now used by Accurate ECN; CWR and ECE are from RFC 3168. The three
// Rsv bits must be sent as zero and are ignored on receipt (RFC 9293
// section 3.1), so the Repr does not carry them.
//
// TCP has no length field: the segment is whatever the IP layer delivers,
// so a view's span must be exactly the segment (header plus payload) with
// any IP or link padding already trimmed.
#ifndef NETSTACK_WIRE_TCP_H_
#define NETSTACK_WIRE_TCP_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>

#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"

namespace netstack::wire {

// Bits of header byte 13, as returned by TcpHeaderT::Flags().
namespace tcp_flag {
inline constexpr uint8_t kFin = 0x01;
inline constexpr uint8_t kSyn = 0x02;
inline constexpr uint8_t kRst = 0x04;
inline constexpr uint8_t kPsh = 0x08;
inline constexpr uint8_t kAck = 0x10;
inline constexpr uint8_t kUrg = 0x20;
inline constexpr uint8_t kEce = 0x40;
inline constexpr uint8_t kCwr = 0x80;
}  // namespace tcp_flag

// Option kinds (IANA "TCP Option Kind Numbers") that this layer interprets.
// Every other kind is skipped by its length byte and counted.
enum class TcpOptionKind : uint8_t {
  kEndOfList = 0,      // RFC 9293 section 3.2
  kNop = 1,            // RFC 9293 section 3.2
  kMss = 2,            // RFC 9293 section 3.2, length 4
  kWindowScale = 3,    // RFC 7323 section 2.2, length 3
  kSackPermitted = 4,  // RFC 2018 section 2, length 2
  kSack = 5,           // RFC 2018 section 3, length 2 + 8n
  kTimestamps = 8,     // RFC 7323 section 3.2, length 10
};

namespace internal {
// Non-template halves of TcpHeaderT, defined in tcp.cc.

// Validates an option area as described at TcpHeaderT::Check().
WireError CheckTcpOptions(std::span<const uint8_t> options);
// Folded (non-complemented) sum of a header with its checksum field
// (bytes 16-17) counted as zero.
uint16_t TcpHeaderSumWithoutChecksum(std::span<const uint8_t> header);
}  // namespace internal

// View over the bytes of one TCP segment. `Byte` is `const uint8_t` for a
// read-only view and `uint8_t` for a writable one; setters exist only on
// the writable view.
//
// Guarantee: after Check() returns kOk, every accessor reads inside the
// span: HeaderLen() <= size, Options() is the validated option area and
// Payload() is the rest of the span.
template <typename Byte>
class TcpHeaderT {
 public:
  static constexpr bool kMutable = !std::is_const_v<Byte>;
  static constexpr size_t kSrcPortOffset = 0;
  static constexpr size_t kDstPortOffset = 2;
  static constexpr size_t kSeqOffset = 4;
  static constexpr size_t kAckOffset = 8;
  static constexpr size_t kDataOffsetOffset = 12;  // high nibble; AE bit 0
  static constexpr size_t kFlagsOffset = 13;
  static constexpr size_t kWindowOffset = 14;
  static constexpr size_t kChecksumOffset = 16;
  static constexpr size_t kUrgentOffset = 18;
  static constexpr size_t kOptionsOffset = 20;
  static constexpr size_t kHeaderLen = 20;     // without options
  static constexpr size_t kMaxHeaderLen = 60;  // data offset 15
  static constexpr size_t kMaxOptionsLen = kMaxHeaderLen - kHeaderLen;
  static constexpr uint8_t kAeBit = 0x01;  // in byte 12

  explicit TcpHeaderT(std::span<Byte> bytes) : bytes_(bytes) {}

  // kTruncated: fewer than 20 bytes. kBadHeaderLength: data offset below 5
  // or the header it announces is longer than the span. Then the option
  // area is walked (RFC 9293 section 3.2): EOL ends the list (the rest is
  // padding and not examined), NOP is a single byte, every other kind has a
  // length byte covering kind and length. kOptionOverflow: the length byte
  // is missing or the option runs past the header. kBadOptionLength: a
  // length below 2, or a known kind with the wrong length (MSS 4, Window
  // Scale 3, SACK-Permitted 2, Timestamps 10, SACK 2 + 8n with n in 1..4).
  [[nodiscard]] WireError Check() const {
    if (bytes_.size() < kHeaderLen) return WireError::kTruncated;
    const size_t header_len = HeaderLen();
    if (header_len < kHeaderLen || header_len > bytes_.size()) {
      return WireError::kBadHeaderLength;
    }
    return internal::CheckTcpOptions(Options());
  }

  uint16_t SrcPort() const { return LoadBe16(&bytes_[kSrcPortOffset]); }
  uint16_t DstPort() const { return LoadBe16(&bytes_[kDstPortOffset]); }
  uint32_t SeqNumber() const { return LoadBe32(&bytes_[kSeqOffset]); }
  uint32_t AckNumber() const { return LoadBe32(&bytes_[kAckOffset]); }
  // In 32-bit words, as on the wire.
  uint8_t DataOffset() const {
    return static_cast<uint8_t>(bytes_[kDataOffsetOffset] >> 4);
  }
  size_t HeaderLen() const { return size_t{DataOffset()} * 4; }
  // The tcp_flag:: bits.
  uint8_t Flags() const { return bytes_[kFlagsOffset]; }
  bool HasFlags(uint8_t mask) const { return (Flags() & mask) == mask; }
  bool Ae() const { return (bytes_[kDataOffsetOffset] & kAeBit) != 0; }
  // Raw field: the scale factor is applied by the TCP layer (RFC 7323
  // section 2.2), never here.
  uint16_t Window() const { return LoadBe16(&bytes_[kWindowOffset]); }
  uint16_t Checksum() const { return LoadBe16(&bytes_[kChecksumOffset]); }
  uint16_t UrgentPointer() const { return LoadBe16(&bytes_[kUrgentOffset]); }
  std::span<Byte> Options() const {
    return bytes_.subspan(kOptionsOffset, HeaderLen() - kOptionsOffset);
  }
  std::span<Byte> Payload() const { return bytes_.subspan(HeaderLen()); }
  std::span<Byte> bytes() const { return bytes_; }

  // Checksums (RFC 9293 section 3.1). `pseudo_header_sum` is
  // Ipv4PseudoHeaderSum / Ipv6PseudoHeaderSum with protocol 6 and the
  // length of header plus payload. The variants taking `payload_sum` read
  // only the first HeaderLen() bytes of the span and take the payload from
  // the accumulator, which must hold exactly the payload bytes in order:
  // this serves a segment whose payload lives in chunks elsewhere, such as
  // each segment the software-GSO splitter cuts from one large send (it
  // sums that segment's slice of the shared chunks, then fills the
  // per-segment header). The payload starts at an even offset because
  // HeaderLen() is a multiple of 4, so a separately summed payload
  // combines exactly. The other variants use Payload() of the span.
  //
  // Precondition for all: Check() returned kOk or the header was written
  // by TcpRepr::Emit into this span.

  // The checksum field value for this header and payload; the stored field
  // is ignored. A computed zero is a valid TCP checksum and stays zero.
  uint16_t ComputeChecksum(uint16_t pseudo_header_sum,
                           const ChecksumAccumulator& payload_sum) const {
    ChecksumAccumulator acc;
    acc.AddFolded(internal::TcpHeaderSumWithoutChecksum(
        std::span<const uint8_t>(bytes_.first(HeaderLen()))));
    acc.AddFolded(pseudo_header_sum);
    acc.AddFolded(payload_sum.Folded());
    return acc.Checksum();
  }
  uint16_t ComputeChecksum(uint16_t pseudo_header_sum) const {
    return ComputeChecksum(pseudo_header_sum, PayloadSum());
  }
  void FillChecksum(uint16_t pseudo_header_sum,
                    const ChecksumAccumulator& payload_sum)
    requires kMutable
  {
    SetChecksum(ComputeChecksum(pseudo_header_sum, payload_sum));
  }
  void FillChecksum(uint16_t pseudo_header_sum)
    requires kMutable
  {
    FillChecksum(pseudo_header_sum, PayloadSum());
  }
  // True when pseudo-header, header (with its stored checksum) and payload
  // sum to all ones (RFC 1071 section 1), which accepts either encoding of
  // a zero checksum.
  bool ChecksumValid(uint16_t pseudo_header_sum,
                     const ChecksumAccumulator& payload_sum) const {
    ChecksumAccumulator acc;
    acc.Add(std::span<const uint8_t>(bytes_.first(HeaderLen())));
    acc.AddFolded(pseudo_header_sum);
    acc.AddFolded(payload_sum.Folded());
    return acc.Folded() == 0xffff;
  }
  bool ChecksumValid(uint16_t pseudo_header_sum) const {
    return ChecksumValid(pseudo_header_sum, PayloadSum());
  }

  void SetSrcPort(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kSrcPortOffset], v);
  }
  void SetDstPort(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kDstPortOffset], v);
  }
  void SetSeqNumber(uint32_t v)
    requires kMutable
  {
    StoreBe32(&bytes_[kSeqOffset], v);
  }
  void SetAckNumber(uint32_t v)
    requires kMutable
  {
    StoreBe32(&bytes_[kAckOffset], v);
  }
  // `words` in 5..15; only the high nibble of byte 12 changes.
  void SetDataOffset(uint8_t words)
    requires kMutable
  {
    bytes_[kDataOffsetOffset] = static_cast<uint8_t>(
        (words << 4) | (bytes_[kDataOffsetOffset] & 0x0f));
  }
  void SetFlags(uint8_t flags)
    requires kMutable
  {
    bytes_[kFlagsOffset] = flags;
  }
  void SetAe(bool ae)
    requires kMutable
  {
    bytes_[kDataOffsetOffset] = static_cast<uint8_t>(
        (bytes_[kDataOffsetOffset] & ~kAeBit) | (ae ? kAeBit : 0));
  }
  void SetWindow(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kWindowOffset], v);
  }
  void SetChecksum(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kChecksumOffset], v);
  }
  void SetUrgentPointer(uint16_t v)
    requires kMutable
  {
    StoreBe16(&bytes_[kUrgentOffset], v);
  }

 private:
  ChecksumAccumulator PayloadSum() const {
    ChecksumAccumulator acc;
    acc.Add(std::span<const uint8_t>(Payload()));
    return acc;
  }

  std::span<Byte> bytes_;
};

using TcpHeader = TcpHeaderT<const uint8_t>;
using MutableTcpHeader = TcpHeaderT<uint8_t>;

// One SACK block (RFC 2018 section 3): the sequence space [left, right).
struct TcpSackBlock {
  uint32_t left = 0;
  uint32_t right = 0;
  friend bool operator==(const TcpSackBlock&, const TcpSackBlock&) = default;
};

// The Timestamps option (RFC 7323 section 3.2).
struct TcpTimestamps {
  uint32_t tsval = 0;
  uint32_t tsecr = 0;
  friend bool operator==(const TcpTimestamps&,
                         const TcpTimestamps&) = default;
};

// The meaning of a TCP header. Options are kept as semantic fields; which
// of them are allowed on which segment (MSS only on SYN, ...) is the TCP
// layer's business, not this one's.
struct TcpRepr {
  // A SACK option holds at most 4 blocks: 2 + 8 * 4 = 34 bytes is the
  // largest multiple that fits the 40-byte option area (RFC 2018 section 3).
  static constexpr size_t kMaxSackBlocks = 4;

  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint32_t seq = 0;
  uint32_t ack = 0;
  uint8_t flags = 0;  // tcp_flag:: bits
  bool ae = false;    // Accurate ECN bit, see the file comment
  uint16_t window = 0;  // raw field, not scaled
  uint16_t urgent_pointer = 0;

  std::optional<uint16_t> mss;
  // The shift count as received. RFC 7323 section 2.3 caps it at 14; the
  // TCP layer clamps it, so a peer's out-of-range value stays visible here.
  std::optional<uint8_t> window_scale;
  bool sack_permitted = false;
  // Blocks [0, sack_count) are meaningful; Parse zeroes the rest so that
  // operator== compares only what was on the wire.
  std::array<TcpSackBlock, kMaxSackBlocks> sack_blocks{};
  uint8_t sack_count = 0;
  std::optional<TcpTimestamps> timestamps;
  // Options of a kind not listed in TcpOptionKind, skipped by Parse (RFC
  // 9293 section 3.1 requires receivers to ignore them). Emit never writes
  // them: this layer cannot know what they meant.
  uint8_t unknown_options = 0;

  // Check()s the view, then fills `out`. When a known option appears more
  // than once, the last occurrence wins. The checksum is not verified.
  [[nodiscard]] static WireError Parse(const TcpHeader& header, TcpRepr& out);

  // Bytes Emit writes: 20 plus the options, always a multiple of 4.
  size_t BufferLen() const;
  // SACK blocks Emit writes: sack_count capped at kMaxSackBlocks and at
  // what fits in the option area after the other options. Like Linux, the
  // blocks that do not fit are dropped (the first ones are kept: RFC 2018
  // section 4 puts the most recent block first).
  size_t EmittedSackBlocks() const;
  // Writes BufferLen() bytes at the start of `header`, which must hold at
  // least that many, with a zero checksum: fill it afterwards with
  // MutableTcpHeader::FillChecksum once the payload is in place. Options
  // are laid out as Linux does (net/ipv4/tcp_output.c, tcp_options_write),
  // so Linux segments re-emit byte for byte:
  //   MSS                        02 04 mm mm
  //   Timestamps (+SACK-Perm.)   04 02 08 0a <tsval> <tsecr>
  //   Timestamps                 01 01 08 0a <tsval> <tsecr>
  //   SACK-Permitted alone       01 01 04 02
  //   Window Scale               01 03 03 ss
  //   SACK                       01 01 05 <2+8n> <left right>...
  // Unknown options are not re-emitted (see unknown_options).
  void Emit(MutableTcpHeader header) const;

  friend bool operator==(const TcpRepr&, const TcpRepr&) = default;
};

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_TCP_H_
