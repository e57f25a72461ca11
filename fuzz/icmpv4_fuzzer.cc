// ICMPv4 parser (netstack/wire/icmpv4.h). Emit fills the checksum and
// writes the unused bytes of Destination Unreachable and Time Exceeded as
// zero, so: emitting a parsed message gives one with a valid checksum that
// parses to the same Repr, and emitting that again gives the same bytes
// (a fixed point). A message whose checksum was valid and whose unused
// bytes were zero re-emits exactly, but for a checksum of 0xffff, which is
// the same as 0x0000 (SameChecksum).
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/icmpv4.h"

namespace netstack::wire {

std::vector<uint8_t> EmitIcmpv4(const Icmpv4Repr& repr) {
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableIcmpv4Packet(std::span<uint8_t>(out)));
  return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Icmpv4Packet packet(std::span<const uint8_t>(data, size));
  Icmpv4Repr repr;
  if (Icmpv4Repr::Parse(packet, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.BufferLen() == size);
  FUZZ_CHECK(repr.Type() == packet.Type());
  const std::vector<uint8_t> out = EmitIcmpv4(repr);
  const Icmpv4Packet emitted{std::span<const uint8_t>(out)};
  FUZZ_CHECK(emitted.ChecksumValid());
  Icmpv4Repr again;
  FUZZ_CHECK(Icmpv4Repr::Parse(emitted, again) == WireError::kOk);
  FUZZ_CHECK(again == repr);
  FUZZ_CHECK(EmitIcmpv4(again) == out);
  if (packet.ChecksumValid() &&
      std::memcmp(out.data() + 4, data + 4, 4) == 0) {
    FUZZ_CHECK(std::memcmp(out.data(), data, 2) == 0);
    FUZZ_CHECK(fuzz::SameChecksum(emitted.Checksum(), packet.Checksum()));
    FUZZ_CHECK(std::memcmp(out.data() + 4, data + 4, size - 4) == 0);
  }
  return 0;
}

}  // namespace netstack::wire
