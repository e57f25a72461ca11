// TCP header parser with options (netstack/wire/tcp.h). The Repr keeps
// options by meaning, so the bytes of a parsed header need not come back
// (option order, padding, unknown kinds); what must hold is: emitting a
// parsed header gives one that parses to the same Repr, except the
// unknown options (never re-emitted) and the SACK blocks that do not fit
// beside the other options (EmittedSackBlocks); emitting that again gives
// the same bytes; a header without options re-emits exactly but for the
// checksum and the reserved bits; and a filled checksum checks.
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "netstack/wire/checksum.h"
#include "netstack/wire/tcp.h"

namespace netstack::wire {

std::vector<uint8_t> EmitTcp(const TcpRepr& repr) {
  std::vector<uint8_t> out(repr.BufferLen());
  repr.Emit(MutableTcpHeader(std::span<uint8_t>(out)));
  return out;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const TcpHeader header(std::span<const uint8_t>(data, size));
  TcpRepr repr;
  if (TcpRepr::Parse(header, repr) != WireError::kOk) return 0;
  FUZZ_CHECK(repr.sack_count <= TcpRepr::kMaxSackBlocks);
  FUZZ_CHECK(repr.BufferLen() <= TcpHeader::kMaxHeaderLen);
  FUZZ_CHECK(repr.BufferLen() % 4 == 0);

  TcpRepr expected = repr;
  expected.unknown_options = 0;
  expected.sack_count = static_cast<uint8_t>(repr.EmittedSackBlocks());
  for (size_t i = expected.sack_count; i < TcpRepr::kMaxSackBlocks; ++i) {
    expected.sack_blocks[i] = {};
  }
  const std::vector<uint8_t> out = EmitTcp(repr);
  TcpRepr again;
  FUZZ_CHECK(TcpRepr::Parse(TcpHeader(std::span<const uint8_t>(out)), again) ==
             WireError::kOk);
  FUZZ_CHECK(again == expected);
  FUZZ_CHECK(EmitTcp(again) == out);

  if (header.HeaderLen() == TcpHeader::kHeaderLen) {
    FUZZ_CHECK(out.size() == TcpHeader::kHeaderLen);
    FUZZ_CHECK(std::memcmp(out.data(), data, 12) == 0);
    FUZZ_CHECK((out[12] & 0xf1) == (data[12] & 0xf1));
    FUZZ_CHECK(std::memcmp(out.data() + 13, data + 13, 3) == 0);
    FUZZ_CHECK(std::memcmp(out.data() + 18, data + 18, 2) == 0);
  }

  // The emitted header in front of the original payload, checksummed.
  std::vector<uint8_t> segment = out;
  segment.insert(segment.end(), data + header.HeaderLen(), data + size);
  const Ipv4Address a = Ipv4Address::FromU32(0x0a000001);
  const Ipv4Address b = Ipv4Address::FromU32(0x0a000002);
  const uint16_t pseudo = Ipv4PseudoHeaderSum(a, b, 6, segment.size());
  MutableTcpHeader(std::span<uint8_t>(segment)).FillChecksum(pseudo);
  FUZZ_CHECK(
      TcpHeader(std::span<const uint8_t>(segment)).ChecksumValid(pseudo));
  return 0;
}

}  // namespace netstack::wire
