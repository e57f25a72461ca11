// IPv6 fixed header and extension header chain (netstack/wire/ipv6.h).
// The fixed header's Repr keeps every field, so it re-emits exactly. The
// walk over the extension headers must stay inside the payload, give the
// same answer twice, and a Fragment header it reports must parse at the
// offset it names and re-emit there exactly but for its reserved bits.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/ipv6.h"

namespace netstack::wire {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Ipv6Packet packet(std::span<const uint8_t>(data, size));
  Ipv6Repr repr;
  if (Ipv6Repr::Parse(packet, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.TotalLen() <= size);
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableIpv6Packet(std::span<uint8_t>(out)));
  FUZZ_CHECK(std::memcmp(out.data(), data, out.size()) == 0);

  const std::span<const uint8_t> payload = packet.Payload();
  Ipv6ExtensionInfo info;
  if (WalkIpv6ExtensionHeaders(payload, repr.next_header, info) !=
      WireError::kOk) {
    return 0;
  }
  FUZZ_CHECK(info.upper_offset <= payload.size());
  FUZZ_CHECK(info.header_count <= kMaxIpv6ExtensionHeaders);
  FUZZ_CHECK(!IsIpv6ExtensionHeader(info.upper_protocol) ||
             (info.fragment && info.fragment->header.offset != 0));
  Ipv6ExtensionInfo again;
  FUZZ_CHECK(WalkIpv6ExtensionHeaders(payload, repr.next_header, again) ==
             WireError::kOk);
  FUZZ_CHECK(again == info);
  if (info.fragment) {
    const size_t at = info.fragment->header_offset;
    FUZZ_CHECK(at + Ipv6FragmentHeader::kHeaderLen <= info.upper_offset);
    const Ipv6FragmentHeader header(payload.subspan(at));
    Ipv6FragmentRepr frag;
    FUZZ_CHECK(Ipv6FragmentRepr::Parse(header, frag) == WireError::kOk);
    FUZZ_CHECK(frag == info.fragment->header);
    std::vector<uint8_t> fout(frag.BufferLen());
    frag.Emit(MutableIpv6FragmentHeader(std::span<uint8_t>(fout)));
    Ipv6FragmentRepr fagain;
    FUZZ_CHECK(Ipv6FragmentRepr::Parse(
                   Ipv6FragmentHeader(std::span<const uint8_t>(fout)),
                   fagain) == WireError::kOk);
    FUZZ_CHECK(fagain == frag);
  }
  if (info.routing) {
    FUZZ_CHECK(info.routing->header_offset < info.upper_offset);
  }
  if (info.unrecognized_option) {
    FUZZ_CHECK(info.unrecognized_option->offset < info.upper_offset);
    FUZZ_CHECK(payload[info.unrecognized_option->offset] ==
               info.unrecognized_option->type);
  }
  return 0;
}

}  // namespace netstack::wire
