// Ethernet header parser (netstack/wire/ethernet.h). The Repr keeps every
// header byte (addresses, EtherType, an 802.1Q/QinQ tag), so emitting a
// parsed header gives back exactly the bytes it came from.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/ethernet.h"

namespace netstack::wire {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const EthernetFrame frame(std::span<const uint8_t>(data, size));
  EthernetRepr repr;
  if (EthernetRepr::Parse(frame, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.BufferLen() == frame.HeaderLen());
  FUZZ_CHECK(repr.BufferLen() <= size);
  FUZZ_CHECK(frame.Payload().size() == size - frame.HeaderLen());
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableEthernetFrame(std::span<uint8_t>(out)));
  FUZZ_CHECK(std::memcmp(out.data(), data, out.size()) == 0);
  EthernetRepr again;
  FUZZ_CHECK(EthernetRepr::Parse(EthernetFrame(std::span<const uint8_t>(out)),
                                 again) == WireError::kOk);
  FUZZ_CHECK(again == repr);
  return 0;
}

}  // namespace netstack::wire
