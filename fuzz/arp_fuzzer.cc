// ARP parser (netstack/wire/arp.h). Parse accepts only Ethernet/IPv4 ARP
// with a known operation, and the Repr keeps every other field, so the 28
// bytes re-emit exactly.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/arp.h"

namespace netstack::wire {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ArpPacket packet(std::span<const uint8_t>(data, size));
  ArpRepr repr;
  if (ArpRepr::Parse(packet, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.BufferLen() <= size);
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableArpPacket(std::span<uint8_t>(out)));
  FUZZ_CHECK(std::memcmp(out.data(), data, out.size()) == 0);
  ArpRepr again;
  FUZZ_CHECK(ArpRepr::Parse(ArpPacket(std::span<const uint8_t>(out)), again) ==
             WireError::kOk);
  FUZZ_CHECK(again == repr);
  return 0;
}

}  // namespace netstack::wire
