// ICMPv6 and NDP parser (netstack/wire/icmpv6.h). The input is two
// addresses (the pseudo-header, 32 bytes) then the message. Emitting a
// parsed message gives one that parses to the same Repr, and emitting
// that again gives the same bytes (a fixed point): NDP options the Repr
// does not keep (unknown kinds, prefixes past the list's capacity) are
// dropped on the first emit, never invented. With the
// checksum filled over the pseudo-header, the emitted message checks.
#include <cstdint>
#include <cstring>
#include <variant>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/icmpv6.h"

namespace netstack::wire {

std::vector<uint8_t> EmitIcmpv6(const Icmpv6Repr& repr) {
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableIcmpv6Packet(std::span<uint8_t>(out)));
  return out;
}

// What a re-parse of an emitted message gives: the Prefix Information
// options past NdpPrefixList::kCapacity are counted (prefixes_ignored) but
// not emitted.
Icmpv6Repr Reemitted(Icmpv6Repr repr) {
  std::visit(
      [](auto& m) {
        if constexpr (requires { m.options.prefixes_ignored; }) {
          m.options.prefixes_ignored = 0;
        }
      },
      repr.message);
  return repr;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 32) return 0;
  const Ipv6Address src = Ipv6Address::FromBytes(data);
  const Ipv6Address dst = Ipv6Address::FromBytes(data + 16);
  const std::span<const uint8_t> message(data + 32, size - 32);
  const Icmpv6Packet packet(message);
  Icmpv6Repr repr;
  if (Icmpv6Repr::Parse(packet, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.type() == packet.Type());
  FUZZ_CHECK(repr.BufferLen() <= message.size());
  const std::vector<uint8_t> out = EmitIcmpv6(repr);
  Icmpv6Repr again;
  FUZZ_CHECK(Icmpv6Repr::Parse(Icmpv6Packet(std::span<const uint8_t>(out)),
                               again) == WireError::kOk);
  FUZZ_CHECK(again == Reemitted(repr));
  FUZZ_CHECK(EmitIcmpv6(again) == out);
  std::vector<uint8_t> summed = out;
  MutableIcmpv6Packet(std::span<uint8_t>(summed)).FillChecksum(src, dst);
  FUZZ_CHECK(
      Icmpv6Packet(std::span<const uint8_t>(summed)).ChecksumValid(src, dst));
  return 0;
}

}  // namespace netstack::wire
