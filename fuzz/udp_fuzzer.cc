// UDP header parser (netstack/wire/udp.h). The Repr holds the ports and
// the length; Emit writes a zero checksum (filled by a separate call), so
// the header re-emits exactly but for the checksum, and after
// FillChecksum the datagram checks as valid.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/udp.h"

namespace netstack::wire {

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const UdpHeader header(std::span<const uint8_t>(data, size));
  UdpRepr repr;
  if (UdpRepr::Parse(header, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(UdpHeader::kHeaderLen + repr.payload_len <= size);
  // The datagram as Length says, header re-emitted in front of the payload.
  std::vector<uint8_t> out(data, data + UdpHeader::kHeaderLen + repr.payload_len);
  repr.Emit(MutableUdpHeader(std::span<uint8_t>(out)));
  FUZZ_CHECK(std::memcmp(out.data(), data, UdpHeader::kChecksumOffset) == 0);
  FUZZ_CHECK(out[6] == 0 && out[7] == 0);
  UdpRepr again;
  MutableUdpHeader view{std::span<uint8_t>(out)};
  FUZZ_CHECK(UdpRepr::Parse(UdpHeader(std::span<const uint8_t>(out)), again) ==
             WireError::kOk);
  FUZZ_CHECK(again == repr);
  const Ipv6Address a{};
  const uint16_t pseudo = Ipv6PseudoHeaderSum(a, a, 17, out.size());
  view.FillChecksum(pseudo);
  FUZZ_CHECK(UdpHeader(std::span<const uint8_t>(out))
                 .ChecksumValid(pseudo, UdpZeroChecksum::kReject));
  return 0;
}

}  // namespace netstack::wire
