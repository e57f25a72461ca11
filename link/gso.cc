#include "link/gso.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <utility>

#include "netstack/buffer/payload_view.h"
#include "netstack/wire/bytes.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/error.h"
#include "netstack/wire/ethernet.h"
#include "netstack/wire/ip_protocol.h"
#include "netstack/wire/ipv4.h"
#include "netstack/wire/ipv6.h"
#include "netstack/wire/tcp.h"

namespace netstack::link {

namespace {

constexpr uint8_t kTcp = static_cast<uint8_t>(wire::IpProtocol::kTcp);
// Flags a super-segment must not carry: a SYN or RST split in several
// packets would repeat it, and Linux's TSO does not adjust the urgent
// pointer either.
constexpr uint8_t kUnsplittableFlags =
    wire::tcp_flag::kSyn | wire::tcp_flag::kRst | wire::tcp_flag::kUrg;
// Flags that belong to one packet of the split only.
constexpr uint8_t kLastOnlyFlags = wire::tcp_flag::kPsh | wire::tcp_flag::kFin;
constexpr uint8_t kFirstOnlyFlags = wire::tcp_flag::kCwr;
// Offsets of the fields a split rewrites (RFC 791, 8200, 9293).
constexpr size_t kIpv4TotalLengthOffset = 2;  // Identification follows
constexpr size_t kIpv4ChecksumOffset = 10;
constexpr size_t kIpv6PayloadLengthOffset = 4;
constexpr size_t kTcpSeqOffset = 4;
constexpr size_t kTcpFlagsOffset = 13;

// Where the headers of a validated super-segment are.
struct Layout {
  bool v4 = false;
  size_t ip_offset = 0;   // after Ethernet and the tag, if any
  size_t tcp_offset = 0;  // after the fixed IP header
  size_t tcp_header_len = 0;
};

// Checks the headers against the contract of buffer::GsoInfo and finds
// them. After kOk, every offset of `layout` lies inside the headers, and
// the TCP header runs exactly to their end.
GsoSplitStatus ParseLayout(const buffer::PacketBuffer& super,
                           Layout& layout) {
  const std::span<const uint8_t> hdr = super.headers().data();
  const wire::EthernetFrame eth(hdr);
  if (eth.Check() != wire::WireError::kOk) return GsoSplitStatus::kMalformed;
  layout.v4 = super.gso().type == buffer::GsoType::kTcpV4;
  const wire::EtherType want =
      layout.v4 ? wire::EtherType::kIpv4 : wire::EtherType::kIpv6;
  // A second tag shows up here as a TPID where the EtherType should be.
  if (eth.Type() != static_cast<uint16_t>(want)) {
    return GsoSplitStatus::kMalformed;
  }
  layout.ip_offset = eth.HeaderLen();
  const size_t ip_and_tcp_header_len = hdr.size() - layout.ip_offset;
  const size_t total_len = ip_and_tcp_header_len + super.payload_size();

  if (layout.v4) {
    if (ip_and_tcp_header_len < wire::Ipv4Packet::kMinHeaderLen) {
      return GsoSplitStatus::kMalformed;
    }
    const wire::Ipv4Packet ip(hdr.subspan(layout.ip_offset));
    if (ip.Version() != wire::Ipv4Packet::kVersion ||
        ip.HeaderLen() != wire::Ipv4Packet::kMinHeaderLen ||
        ip.Protocol() != kTcp || ip.IsFragment() ||
        ip.TotalLength() != total_len) {
      return GsoSplitStatus::kMalformed;
    }
    layout.tcp_offset = layout.ip_offset + wire::Ipv4Packet::kMinHeaderLen;
  } else {
    if (ip_and_tcp_header_len < wire::Ipv6Packet::kHeaderLen) {
      return GsoSplitStatus::kMalformed;
    }
    const wire::Ipv6Packet ip(hdr.subspan(layout.ip_offset));
    if (ip.Version() != wire::Ipv6Packet::kVersion || ip.NextHeader() != kTcp ||
        size_t{ip.PayloadLength()} + wire::Ipv6Packet::kHeaderLen !=
            total_len) {
      return GsoSplitStatus::kMalformed;
    }
    layout.tcp_offset = layout.ip_offset + wire::Ipv6Packet::kHeaderLen;
  }

  const wire::TcpHeader tcp(hdr.subspan(layout.tcp_offset));
  if (tcp.Check() != wire::WireError::kOk ||
      tcp.HeaderLen() != tcp.bytes().size() ||
      (tcp.Flags() & kUnsplittableFlags) != 0) {
    return GsoSplitStatus::kMalformed;
  }
  layout.tcp_header_len = tcp.HeaderLen();
  return GsoSplitStatus::kSplit;
}

// Walks the super-segment's payload views front to back, handing out
// sub-views; shares the chunks, never copies.
class PayloadCursor {
 public:
  explicit PayloadCursor(std::span<const buffer::PayloadView> views)
      : views_(views) {}

  // Appends the next `len` bytes to `packet` as sub-views and adds them to
  // `sum`. False if `packet` ran out of view slots.
  bool Take(size_t len, buffer::PacketBuffer& packet,
            wire::ChecksumAccumulator& sum) {
    while (len > 0 && index_ < views_.size()) {
      const buffer::PayloadView& view = views_[index_];
      const uint32_t take = static_cast<uint32_t>(
          std::min<size_t>(len, view.size() - offset_));
      buffer::PayloadView slice = view.Subview(offset_, take);
      sum.Add(slice.bytes());
      if (!packet.AppendPayload(std::move(slice))) return false;
      len -= take;
      offset_ += take;
      if (offset_ == view.size()) {
        ++index_;
        offset_ = 0;
      }
    }
    return true;
  }

 private:
  std::span<const buffer::PayloadView> views_;
  size_t index_ = 0;
  uint32_t offset_ = 0;
};

// What every wire packet's headers share, summed once per super-segment,
// so that each packet only stores the fields that change and adds them to
// these sums (RFC 1071: the sum is order-independent). Sums are folded
// big-endian values.
struct HeaderPlan {
  uint32_t seq = 0;
  uint16_t ident = 0;
  uint8_t flags = 0;
  // TCP: the header without its sequence number, flags byte and checksum,
  // plus the pseudo-header without its length.
  uint16_t tcp_fixed_sum = 0;
  // IPv4: the header without Total Length, Identification and checksum.
  uint16_t ip_fixed_sum = 0;
};

HeaderPlan PlanHeaders(std::span<const uint8_t> hdr, const Layout& layout) {
  HeaderPlan plan;
  // A copy with the per-packet fields zeroed (zero words add nothing).
  std::array<uint8_t, buffer::kMaxHeaderLen> copy;
  std::memcpy(copy.data(), hdr.data(), hdr.size());
  uint8_t* ip = copy.data() + layout.ip_offset;
  uint8_t* tcp = copy.data() + layout.tcp_offset;
  plan.seq = wire::LoadBe32(tcp + kTcpSeqOffset);
  plan.flags = tcp[kTcpFlagsOffset];
  std::memset(tcp + kTcpSeqOffset, 0, 4);
  tcp[kTcpFlagsOffset] = 0;
  std::memset(tcp + wire::TcpHeader::kChecksumOffset, 0, 2);
  wire::ChecksumAccumulator tcp_sum;
  tcp_sum.Add(std::span<const uint8_t>(tcp, layout.tcp_header_len));
  if (layout.v4) {
    const wire::Ipv4Packet parsed(hdr.subspan(layout.ip_offset));
    tcp_sum.AddFolded(
        wire::Ipv4PseudoHeaderSum(parsed.Source(), parsed.Destination(), kTcp,
                                  0));
    plan.ident = parsed.Ident();
    std::memset(ip + kIpv4TotalLengthOffset, 0, 4);  // length and ident
    std::memset(ip + kIpv4ChecksumOffset, 0, 2);
    wire::ChecksumAccumulator ip_sum;
    ip_sum.Add(std::span<const uint8_t>(ip, wire::Ipv4Packet::kMinHeaderLen));
    plan.ip_fixed_sum = ip_sum.Folded();
  } else {
    const wire::Ipv6Packet parsed(hdr.subspan(layout.ip_offset));
    tcp_sum.AddFolded(
        wire::Ipv6PseudoHeaderSum(parsed.Source(), parsed.Destination(), kTcp,
                                  0));
  }
  plan.tcp_fixed_sum = tcp_sum.Folded();
  return plan;
}

// The complement of the end-around-carry sum of `sum`'s 16-bit words.
uint16_t ComplementFold(uint64_t sum) {
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// Writes the fields of wire packet `i` (of `count`) carrying `payload_len`
// bytes whose sum is `payload_sum` into its copy of the headers, and both
// checksums.
void FixHeaders(std::span<uint8_t> hdr, const Layout& layout,
                const HeaderPlan& plan, size_t i, size_t count,
                uint32_t gso_size, size_t payload_len,
                const wire::ChecksumAccumulator& payload_sum) {
  uint8_t* ip = hdr.data() + layout.ip_offset;
  uint8_t* tcp = hdr.data() + layout.tcp_offset;
  const uint32_t seq = plan.seq + static_cast<uint32_t>(i) * gso_size;
  uint8_t flags = plan.flags;
  if (i + 1 != count) flags &= static_cast<uint8_t>(~kLastOnlyFlags);
  if (i != 0) flags &= static_cast<uint8_t>(~kFirstOnlyFlags);
  wire::StoreBe32(tcp + kTcpSeqOffset, seq);
  tcp[kTcpFlagsOffset] = flags;

  const uint32_t tcp_len =
      static_cast<uint32_t>(layout.tcp_header_len + payload_len);
  if (layout.v4) {
    const uint16_t total =
        static_cast<uint16_t>(wire::Ipv4Packet::kMinHeaderLen + tcp_len);
    const uint16_t ident = static_cast<uint16_t>(plan.ident + i);
    wire::StoreBe16(ip + kIpv4TotalLengthOffset, total);
    wire::StoreBe16(ip + kIpv4TotalLengthOffset + 2, ident);
    wire::StoreBe16(ip + kIpv4ChecksumOffset,
                    ComplementFold(uint64_t{plan.ip_fixed_sum} + total +
                                   ident));
  } else {
    wire::StoreBe16(ip + kIpv6PayloadLengthOffset,
                    static_cast<uint16_t>(tcp_len));
  }
  wire::StoreBe16(tcp + wire::TcpHeader::kChecksumOffset,
                  ComplementFold(uint64_t{plan.tcp_fixed_sum} + (seq >> 16) +
                                 (seq & 0xffff) + flags + tcp_len +
                                 payload_sum.Folded()));
}

}  // namespace

const char* GsoSplitStatusName(GsoSplitStatus status) {
  switch (status) {
    case GsoSplitStatus::kSplit:
      return "split";
    case GsoSplitStatus::kNotGso:
      return "not_gso";
    case GsoSplitStatus::kMalformed:
      return "malformed";
    case GsoSplitStatus::kBadGsoSize:
      return "bad_gso_size";
    case GsoSplitStatus::kNoBuffer:
      return "no_buffer";
    case GsoSplitStatus::kTooManyViews:
      return "too_many_views";
  }
  return "unknown";
}

GsoSplitStatus SplitGso(buffer::PacketPtr super, buffer::PacketPool& pool,
                        buffer::PacketChain& out, uint32_t mtu) {
  if (!super->is_gso()) {
    out.PushBack(std::move(super));
    return GsoSplitStatus::kNotGso;
  }
  Layout layout;
  if (const GsoSplitStatus s = ParseLayout(*super, layout);
      s != GsoSplitStatus::kSplit) {
    return s;
  }
  const uint32_t gso_size = super->gso().size;
  const size_t payload = super->payload_size();
  const size_t ip_header_len = layout.tcp_offset - layout.ip_offset;
  const size_t largest_ip_len = ip_header_len + layout.tcp_header_len +
                                std::min<size_t>(gso_size, payload);
  if (gso_size == 0 || largest_ip_len > std::min(mtu, kMaxGsoIpLen)) {
    return GsoSplitStatus::kBadGsoSize;
  }

  const std::span<const uint8_t> hdr = super->headers().data();
  const HeaderPlan plan = PlanHeaders(hdr, layout);
  const size_t count = payload == 0 ? 1 : (payload + gso_size - 1) / gso_size;
  // Built aside and appended whole, so a refusal leaves `out` untouched.
  buffer::PacketChain made;
  PayloadCursor cursor(super->payload());
  for (size_t i = 0; i < count; ++i) {
    buffer::PacketPtr p = pool.Allocate();
    if (p == nullptr) return GsoSplitStatus::kNoBuffer;
    // Cannot fail: the super-segment's headers fit the same headroom.
    const auto room = p->headers().Prepend(hdr.size());
    if (!room.has_value()) return GsoSplitStatus::kMalformed;
    std::memcpy(room->data(), hdr.data(), hdr.size());
    const size_t len = std::min<size_t>(gso_size, payload - i * gso_size);
    wire::ChecksumAccumulator payload_sum;
    if (!cursor.Take(len, *p, payload_sum)) {
      return GsoSplitStatus::kTooManyViews;
    }
    FixHeaders(*room, layout, plan, i, count, gso_size, len, payload_sum);
    made.PushBack(std::move(p));
  }
  out.Append(std::move(made));
  return GsoSplitStatus::kSplit;
}

void GsoStats::Count(GsoSplitStatus status, size_t packets) {
  switch (status) {
    case GsoSplitStatus::kSplit:
      ++super_segments;
      packets_out += packets;
      return;
    case GsoSplitStatus::kNotGso:
      ++passed_through;
      return;
    case GsoSplitStatus::kMalformed:
      ++malformed;
      return;
    case GsoSplitStatus::kBadGsoSize:
      ++bad_gso_size;
      return;
    case GsoSplitStatus::kNoBuffer:
      ++no_buffer;
      return;
    case GsoSplitStatus::kTooManyViews:
      ++too_many_views;
      return;
  }
}

}  // namespace netstack::link
