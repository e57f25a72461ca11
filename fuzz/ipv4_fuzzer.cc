// IPv4 header parser (netstack/wire/ipv4.h), options included. The Repr
// keeps every field but the reserved flag (ignored on receipt, written as
// zero) and the header checksum (recomputed by Emit), so a header with a
// valid checksum and the reserved flag clear re-emits exactly; any header
// re-emits to one whose checksum is valid and that parses to the same Repr.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/ipv4.h"

namespace netstack::wire {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Ipv4Packet packet(std::span<const uint8_t>(data, size));
  Ipv4Repr repr;
  if (Ipv4Repr::Parse(packet, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.HeaderLen() == packet.HeaderLen());
  FUZZ_CHECK(repr.TotalLen() <= size);
  FUZZ_CHECK(packet.Payload().size() == repr.payload_len);
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableIpv4Packet(std::span<uint8_t>(out)));
  const bool reserved = (data[6] & 0x80) != 0;
  if (packet.HeaderChecksumValid() && !reserved) {
    FUZZ_CHECK(std::memcmp(out.data(), data, 10) == 0);
    FUZZ_CHECK(fuzz::SameChecksum(LoadBe16(&out[10]), LoadBe16(&data[10])));
    FUZZ_CHECK(std::memcmp(out.data() + 12, data + 12, out.size() - 12) == 0);
  }
  // The emitted header and the original payload, as one packet.
  out.insert(out.end(), data + repr.HeaderLen(), data + repr.TotalLen());
  const Ipv4Packet emitted{std::span<const uint8_t>(out)};
  Ipv4Repr again;
  FUZZ_CHECK(Ipv4Repr::Parse(emitted, again) == WireError::kOk);
  FUZZ_CHECK(emitted.HeaderChecksumValid());
  FUZZ_CHECK(again == repr);
  return 0;
}

}  // namespace netstack::wire
