#include "netstack/ip/fragment.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <utility>

#include "netstack/base/dcheck.h"
#include "netstack/wire/ip_protocol.h"

namespace netstack::ip {
namespace {

using buffer::PacketBuffer;
using buffer::PacketChain;
using buffer::PacketPool;
using buffer::PacketPtr;
using buffer::PayloadView;

// The largest IP packet: IPv4 Total Length and IPv6 Payload Length are
// 16-bit fields (RFC 791 section 3.1, RFC 8200 section 3).
constexpr size_t kMaxIpLength = 65535;
// Fragment data is placed on 8-octet boundaries (both RFCs).
constexpr size_t kFragmentUnit = 8;
// RFC 791 section 3.1: the top bit of an option's type byte is the copied
// flag: "the option is copied into all fragments on fragmentation".
constexpr uint8_t kOptionCopiedFlag = 0x80;
constexpr size_t kIpv6FragmentHeadersLen =
    wire::Ipv6Packet::kHeaderLen + wire::Ipv6FragmentHeader::kHeaderLen;

// Walks the caller's payload views and hands out consecutive byte ranges
// of them as sub-views (sharing the chunks, copying no bytes).
class ViewCursor {
 public:
  explicit ViewCursor(std::span<const PayloadView> views) : views_(views) {}

  // Bytes from here to the end of the `max_views`-th non-empty view.
  size_t Reach(size_t max_views) const {
    size_t bytes = 0;
    size_t used = 0;
    for (size_t i = index_; i < views_.size() && used < max_views; ++i) {
      const size_t avail = views_[i].size() - (i == index_ ? offset_ : 0);
      if (avail == 0) continue;
      bytes += avail;
      ++used;
    }
    return bytes;
  }

  // Appends the next `len` bytes to `packet` as sub-views and advances.
  // False if the views or the packet's view slots run out (callers size
  // `len` with Reach first, so that is an internal error).
  bool Take(size_t len, PacketBuffer& packet) {
    while (len > 0) {
      if (index_ >= views_.size()) return false;
      const PayloadView& view = views_[index_];
      const uint32_t avail = view.size() - offset_;
      if (avail == 0) {
        ++index_;
        offset_ = 0;
        continue;
      }
      const uint32_t piece =
          static_cast<uint32_t>(std::min<size_t>(len, avail));
      if (!packet.AppendPayload(view.Subview(offset_, piece))) return false;
      offset_ += piece;
      len -= piece;
      if (offset_ == view.size()) {
        ++index_;
        offset_ = 0;
      }
    }
    return true;
  }

 private:
  std::span<const PayloadView> views_;
  size_t index_ = 0;
  uint32_t offset_ = 0;
};

size_t TotalSize(std::span<const PayloadView> views) {
  size_t total = 0;
  for (const PayloadView& v : views) total += v.size();
  return total;
}

// The options with the copied flag, for fragments after the first.
// False if the area is malformed.
bool CopiedOptions(const wire::Ipv4OptionBytes& all,
                   wire::Ipv4OptionBytes& out) {
  if (wire::CheckIpv4Options(all.span()) != wire::WireError::kOk) {
    return false;
  }
  std::array<uint8_t, wire::Ipv4OptionBytes::kCapacity> copied;
  size_t n = 0;
  wire::Ipv4OptionReader reader(all.span());
  wire::Ipv4Option option;
  while (reader.Next(option)) {
    // End of List and No Operation have the flag clear: they are dropped,
    // and Emit pads the copied ones to a multiple of 4 again.
    if ((option.type & kOptionCopiedFlag) == 0) continue;
    copied[n++] = option.type;
    copied[n++] = static_cast<uint8_t>(option.data.size() + 2);
    std::memcpy(copied.data() + n, option.data.data(), option.data.size());
    n += option.data.size();
  }
  // A subset of an area that fit, so it fits.
  return out.Assign(std::span<const uint8_t>(copied.data(), n));
}

// One fragment to emit: its data's offset in the datagram being split,
// its length, and whether it is the last.
struct Piece {
  size_t offset = 0;
  size_t len = 0;
  bool last = false;
};

// Cuts `total` bytes of `views` into fragments of at most `mtu` bytes.
// `header_len(offset)` is the header length of the fragment at `offset`;
// `emit(piece, header_bytes)` writes that header. Packets go to `out` only
// if every fragment was built.
template <typename HeaderLenFn, typename EmitFn>
FragmentStatus Split(std::span<const PayloadView> views, size_t total,
                     size_t mtu, PacketPool& pool, HeaderLenFn header_len,
                     EmitFn emit, PacketChain& out) {
  PacketChain chain;
  ViewCursor cursor(views);
  size_t pos = 0;
  do {
    const size_t hl = header_len(pos);
    const size_t room = mtu > hl ? mtu - hl : 0;
    const size_t remaining = total - pos;
    const size_t reach = cursor.Reach(PacketBuffer::kMaxPayloadViews);
    Piece piece;
    piece.offset = pos;
    if (hl <= mtu && remaining <= room && reach >= remaining) {
      // The last fragment may have any length (RFC 791, RFC 8200).
      piece.len = remaining;
      piece.last = true;
    } else {
      if (room < kFragmentUnit) return FragmentStatus::kMtuTooSmall;
      piece.len = std::min(room, reach) & ~(kFragmentUnit - 1);
      if (piece.len == 0) return FragmentStatus::kTooManyViews;
    }
    PacketPtr packet = pool.Allocate();
    if (packet == nullptr) return FragmentStatus::kNoPacket;
    if (!cursor.Take(piece.len, *packet)) {
      NETSTACK_DCHECK(false);  // Reach() sized the piece
      return FragmentStatus::kTooManyViews;
    }
    std::optional<std::span<uint8_t>> bytes = packet->headers().Prepend(hl);
    if (!bytes.has_value()) return FragmentStatus::kNoHeadroom;
    if (FragmentStatus s = emit(piece, *bytes); s != FragmentStatus::kOk) {
      return s;
    }
    chain.PushBack(std::move(packet));
    pos += piece.len;
  } while (pos < total);
  out.Append(std::move(chain));
  return FragmentStatus::kOk;
}

}  // namespace

std::string_view FragmentStatusName(FragmentStatus status) {
  switch (status) {
    case FragmentStatus::kOk:
      return "ok";
    case FragmentStatus::kDontFragment:
      return "dont_fragment";
    case FragmentStatus::kMtuTooSmall:
      return "mtu_too_small";
    case FragmentStatus::kTooBig:
      return "too_big";
    case FragmentStatus::kBadOptions:
      return "bad_options";
    case FragmentStatus::kTooManyViews:
      return "too_many_views";
    case FragmentStatus::kNoPacket:
      return "no_packet";
    case FragmentStatus::kNoHeadroom:
      return "no_headroom";
  }
  return "unknown";
}

FragmentStatus FragmentIpv4(const wire::Ipv4Repr& header,
                            std::span<const PayloadView> payload, size_t mtu,
                            PacketPool& pool, PacketChain& out) {
  const size_t total = TotalSize(payload);
  const size_t first_header_len = header.HeaderLen();
  // The original datagram's Total Length (RFC 791 section 3.1).
  if (size_t{header.fragment_offset} + first_header_len + total >
      kMaxIpLength) {
    return FragmentStatus::kTooBig;
  }
  mtu = std::min(mtu, kMaxIpLength);
  if (header.dont_fragment && first_header_len + total > mtu) {
    return FragmentStatus::kDontFragment;
  }
  wire::Ipv4OptionBytes copied;
  if (!CopiedOptions(header.options, copied)) {
    return FragmentStatus::kBadOptions;
  }
  wire::Ipv4Repr rest = header;
  rest.options = copied;
  const size_t rest_header_len = rest.HeaderLen();

  return Split(
      payload, total, mtu, pool,
      [&](size_t offset) {
        return offset == 0 ? first_header_len : rest_header_len;
      },
      [&](const Piece& piece, std::span<uint8_t> bytes) {
        // Fits the datagram only because of the view limit; DF forbids it.
        if (!piece.last && header.dont_fragment) {
          return FragmentStatus::kTooManyViews;
        }
        wire::Ipv4Repr repr = piece.offset == 0 ? header : rest;
        repr.fragment_offset =
            static_cast<uint16_t>(header.fragment_offset + piece.offset);
        repr.more_fragments = !piece.last || header.more_fragments;
        repr.payload_len = static_cast<uint16_t>(piece.len);
        NETSTACK_DCHECK(repr.HeaderLen() == bytes.size());
        repr.Emit(wire::MutableIpv4Packet(bytes));
        return FragmentStatus::kOk;
      },
      out);
}

FragmentStatus FragmentIpv6(const wire::Ipv6Repr& header,
                            uint32_t identification,
                            std::span<const PayloadView> payload, size_t mtu,
                            PacketPool& pool, PacketChain& out) {
  const size_t total = TotalSize(payload);
  // The original packet's Payload Length (RFC 8200 section 3).
  if (total > kMaxIpLength) return FragmentStatus::kTooBig;
  mtu = std::min(mtu, kMaxIpLength + wire::Ipv6Packet::kHeaderLen);

  ViewCursor whole(payload);
  if (wire::Ipv6Packet::kHeaderLen + total <= mtu &&
      whole.Reach(PacketBuffer::kMaxPayloadViews) >= total) {
    // Fits: one packet, no Fragment header.
    PacketPtr packet = pool.Allocate();
    if (packet == nullptr) return FragmentStatus::kNoPacket;
    if (!whole.Take(total, *packet)) return FragmentStatus::kTooManyViews;
    auto bytes = packet->headers().Prepend(wire::Ipv6Packet::kHeaderLen);
    if (!bytes.has_value()) return FragmentStatus::kNoHeadroom;
    wire::Ipv6Repr repr = header;
    repr.payload_len = static_cast<uint16_t>(total);
    repr.Emit(wire::MutableIpv6Packet(*bytes));
    out.PushBack(std::move(packet));
    return FragmentStatus::kOk;
  }

  return Split(
      payload, total, mtu, pool, [](size_t) { return kIpv6FragmentHeadersLen; },
      [&](const Piece& piece, std::span<uint8_t> bytes) {
        wire::Ipv6Repr fixed = header;
        fixed.next_header = static_cast<uint8_t>(wire::IpProtocol::kIpv6Frag);
        fixed.payload_len = static_cast<uint16_t>(
            wire::Ipv6FragmentHeader::kHeaderLen + piece.len);
        fixed.Emit(wire::MutableIpv6Packet(bytes));
        wire::Ipv6FragmentRepr fragment;
        fragment.next_header = header.next_header;
        fragment.offset = static_cast<uint16_t>(piece.offset);
        fragment.more_fragments = !piece.last;
        fragment.identification = identification;
        fragment.Emit(wire::MutableIpv6FragmentHeader(
            bytes.subspan(wire::Ipv6Packet::kHeaderLen)));
        return FragmentStatus::kOk;
      },
      out);
}

}  // namespace netstack::ip
