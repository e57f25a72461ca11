#include "netstack/wire/tcp.h"

#include <algorithm>

namespace netstack::wire {
namespace {

constexpr uint8_t kKindEol = static_cast<uint8_t>(TcpOptionKind::kEndOfList);
constexpr uint8_t kKindNop = static_cast<uint8_t>(TcpOptionKind::kNop);
constexpr uint8_t kKindMss = static_cast<uint8_t>(TcpOptionKind::kMss);
constexpr uint8_t kKindWs = static_cast<uint8_t>(TcpOptionKind::kWindowScale);
constexpr uint8_t kKindSackPermitted =
    static_cast<uint8_t>(TcpOptionKind::kSackPermitted);
constexpr uint8_t kKindSack = static_cast<uint8_t>(TcpOptionKind::kSack);
constexpr uint8_t kKindTs = static_cast<uint8_t>(TcpOptionKind::kTimestamps);

constexpr uint8_t kMssLen = 4;
constexpr uint8_t kWsLen = 3;
constexpr uint8_t kSackPermittedLen = 2;
constexpr uint8_t kTsLen = 10;
constexpr size_t kSackBaseLen = 2;
constexpr size_t kSackBlockLen = 8;

// Emitted sizes, each padded with NOPs to a 4-byte boundary as Linux does.
constexpr size_t kMssAligned = 4;
constexpr size_t kTsAligned = 12;
constexpr size_t kSackPermittedAligned = 4;
constexpr size_t kWsAligned = 4;
constexpr size_t kSackBaseAligned = 4;

bool KnownOptionLengthOk(uint8_t kind, size_t len) {
  switch (kind) {
    case kKindMss:
      return len == kMssLen;
    case kKindWs:
      return len == kWsLen;
    case kKindSackPermitted:
      return len == kSackPermittedLen;
    case kKindTs:
      return len == kTsLen;
    case kKindSack: {
      if (len < kSackBaseLen + kSackBlockLen) return false;
      const size_t body = len - kSackBaseLen;
      return body % kSackBlockLen == 0 &&
             body / kSackBlockLen <= TcpRepr::kMaxSackBlocks;
    }
    default:
      return true;  // unknown kinds: any length >= 2 is acceptable
  }
}

// Walks an option area (RFC 9293 section 3.2) and calls
// `fn(kind, value)` for each option other than NOP, where `value` is the
// bytes after the kind and length. Stops at EOL or the end of the area.
// Returns the first structural error; `fn` is only called for options
// that are entirely inside the area and have a valid length.
template <typename Fn>
WireError ForEachOption(std::span<const uint8_t> options, Fn fn) {
  size_t i = 0;
  while (i < options.size()) {
    const uint8_t kind = options[i];
    if (kind == kKindEol) break;
    if (kind == kKindNop) {
      ++i;
      continue;
    }
    if (i + 1 >= options.size()) return WireError::kOptionOverflow;
    const size_t len = options[i + 1];
    // The length covers kind and length bytes; below 2 the walk could not
    // advance (RFC 9293 section 3.2).
    if (len < 2) return WireError::kBadOptionLength;
    if (len > options.size() - i) return WireError::kOptionOverflow;
    if (!KnownOptionLengthOk(kind, len)) return WireError::kBadOptionLength;
    fn(kind, options.subspan(i + 2, len - 2));
    i += len;
  }
  return WireError::kOk;
}

// Writes a NOP-padded option prefix and returns the next write position.
uint8_t* Put(uint8_t* p, uint8_t b0, uint8_t b1, uint8_t b2, uint8_t b3) {
  p[0] = b0;
  p[1] = b1;
  p[2] = b2;
  p[3] = b3;
  return p + 4;
}

}  // namespace

namespace internal {

WireError CheckTcpOptions(std::span<const uint8_t> options) {
  return ForEachOption(options, [](uint8_t, std::span<const uint8_t>) {});
}

uint16_t TcpHeaderSumWithoutChecksum(std::span<const uint8_t> header) {
  // Both pieces start at even offsets, so skipping the 2-byte checksum
  // field leaves every other word in place.
  ChecksumAccumulator acc;
  acc.Add(header.first(TcpHeader::kChecksumOffset));
  acc.Add(header.subspan(TcpHeader::kChecksumOffset + 2));
  return acc.Folded();
}

}  // namespace internal

WireError TcpRepr::Parse(const TcpHeader& header, TcpRepr& out) {
  if (WireError e = header.Check(); e != WireError::kOk) return e;
  out = TcpRepr{};
  out.src_port = header.SrcPort();
  out.dst_port = header.DstPort();
  out.seq = header.SeqNumber();
  out.ack = header.AckNumber();
  out.flags = header.Flags();
  out.ae = header.Ae();
  out.window = header.Window();
  out.urgent_pointer = header.UrgentPointer();
  return ForEachOption(
      header.Options(), [&out](uint8_t kind, std::span<const uint8_t> value) {
        switch (kind) {
          case kKindMss:
            out.mss = LoadBe16(value.data());
            break;
          case kKindWs:
            out.window_scale = value[0];
            break;
          case kKindSackPermitted:
            out.sack_permitted = true;
            break;
          case kKindTs:
            out.timestamps =
                TcpTimestamps{LoadBe32(value.data()), LoadBe32(&value[4])};
            break;
          case kKindSack: {
            out.sack_blocks = {};
            const size_t n = value.size() / kSackBlockLen;
            for (size_t b = 0; b < n; ++b) {
              const uint8_t* p = &value[b * kSackBlockLen];
              out.sack_blocks[b] = TcpSackBlock{LoadBe32(p), LoadBe32(p + 4)};
            }
            out.sack_count = static_cast<uint8_t>(n);
            break;
          }
          default:
            ++out.unknown_options;  // at most 20 fit in 40 bytes
            break;
        }
      });
}

namespace {

size_t OptionsLenWithoutSack(const TcpRepr& r) {
  size_t len = 0;
  if (r.mss) len += kMssAligned;
  if (r.timestamps) {
    len += kTsAligned;  // SACK-Permitted rides in its padding
  } else if (r.sack_permitted) {
    len += kSackPermittedAligned;
  }
  if (r.window_scale) len += kWsAligned;
  return len;  // at most 20, so always below the 40-byte limit
}

}  // namespace

size_t TcpRepr::EmittedSackBlocks() const {
  const size_t room = TcpHeader::kMaxOptionsLen - OptionsLenWithoutSack(*this);
  if (room < kSackBaseAligned + kSackBlockLen) return 0;
  const size_t fit = (room - kSackBaseAligned) / kSackBlockLen;
  return std::min({size_t{sack_count}, kMaxSackBlocks, fit});
}

size_t TcpRepr::BufferLen() const {
  const size_t sacks = EmittedSackBlocks();
  return TcpHeader::kHeaderLen + OptionsLenWithoutSack(*this) +
         (sacks == 0 ? 0 : kSackBaseAligned + sacks * kSackBlockLen);
}

void TcpRepr::Emit(MutableTcpHeader header) const {
  const size_t len = BufferLen();
  header.SetSrcPort(src_port);
  header.SetDstPort(dst_port);
  header.SetSeqNumber(seq);
  header.SetAckNumber(ack);
  // Whole byte: data offset, zero reserved bits (RFC 9293 section 3.1),
  // AE.
  header.bytes()[TcpHeader::kDataOffsetOffset] = static_cast<uint8_t>(
      ((len / 4) << 4) | (ae ? TcpHeader::kAeBit : 0));
  header.SetFlags(flags);
  header.SetWindow(window);
  header.SetChecksum(0);
  header.SetUrgentPointer(urgent_pointer);

  uint8_t* p = &header.bytes()[TcpHeader::kOptionsOffset];
  if (mss) {
    p = Put(p, kKindMss, kMssLen, static_cast<uint8_t>(*mss >> 8),
            static_cast<uint8_t>(*mss));
  }
  if (timestamps) {
    // SACK-Permitted takes the place of the two NOPs that would align the
    // timestamps, saving four bytes in the SYN.
    p = sack_permitted ? Put(p, kKindSackPermitted, kSackPermittedLen,
                             kKindTs, kTsLen)
                       : Put(p, kKindNop, kKindNop, kKindTs, kTsLen);
    StoreBe32(p, timestamps->tsval);
    StoreBe32(p + 4, timestamps->tsecr);
    p += 8;
  } else if (sack_permitted) {
    p = Put(p, kKindNop, kKindNop, kKindSackPermitted, kSackPermittedLen);
  }
  if (window_scale) {
    p = Put(p, kKindNop, kKindWs, kWsLen, *window_scale);
  }
  if (const size_t n = EmittedSackBlocks(); n > 0) {
    p = Put(p, kKindNop, kKindNop, kKindSack,
            static_cast<uint8_t>(kSackBaseLen + n * kSackBlockLen));
    for (size_t b = 0; b < n; ++b) {
      StoreBe32(p, sack_blocks[b].left);
      StoreBe32(p + 4, sack_blocks[b].right);
      p += kSackBlockLen;
    }
  }
}

}  // namespace netstack::wire
