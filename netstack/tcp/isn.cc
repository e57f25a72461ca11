#include "netstack/tcp/isn.h"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace netstack::tcp {
namespace {

uint64_t LoadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct SipState {
  uint64_t v0, v1, v2, v3;

  // One SipRound (section 2 of the paper): an ARX network on four words.
  void Round() {
    v0 += v1;
    v1 = std::rotl(v1, 13);
    v1 ^= v0;
    v0 = std::rotl(v0, 32);
    v2 += v3;
    v3 = std::rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = std::rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = std::rotl(v1, 17);
    v1 ^= v2;
    v2 = std::rotl(v2, 32);
  }
  // c = 2 compression rounds per message word.
  void Compress(uint64_t m) {
    v3 ^= m;
    Round();
    Round();
    v0 ^= m;
  }
};

size_t PutAddress(const transport::IpAddress& a, uint8_t* p) {
  if (a.is_v4()) {
    std::memcpy(p, a.v4().bytes.data(), 4);
    return 4;
  }
  std::memcpy(p, a.v6().bytes.data(), 16);
  return 16;
}

size_t PutPort(uint16_t port, uint8_t* p) {
  p[0] = static_cast<uint8_t>(port >> 8);
  p[1] = static_cast<uint8_t>(port);
  return 2;
}

}  // namespace

uint64_t SipHash24(const SipKey& key, std::span<const uint8_t> data) {
  const uint64_t k0 = LoadLe64(key.data());
  const uint64_t k1 = LoadLe64(key.data() + 8);
  // Initialisation: the key XORed with "somepseudorandomlygeneratedbytes".
  SipState s{k0 ^ 0x736f6d6570736575, k1 ^ 0x646f72616e646f6d,
             k0 ^ 0x6c7967656e657261, k1 ^ 0x7465646279746573};
  const size_t whole = data.size() & ~size_t{7};
  for (size_t i = 0; i < whole; i += 8) s.Compress(LoadLe64(&data[i]));
  // The last word: the remaining 0-7 bytes, little-endian, with the
  // message length mod 256 in the top byte.
  uint64_t last = uint64_t{static_cast<uint8_t>(data.size())} << 56;
  for (size_t i = whole; i < data.size(); ++i) {
    last |= uint64_t{data[i]} << (8 * (i - whole));
  }
  s.Compress(last);
  // Finalisation: d = 4 rounds.
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.Round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

size_t SerializeFourTuple(const transport::FourTuple& t,
                          std::span<uint8_t, kMaxFourTupleBytes> out) {
  uint8_t* p = out.data();
  size_t n = PutAddress(t.local.ip, p);
  n += PutPort(t.local.port, p + n);
  n += PutAddress(t.remote.ip, p + n);
  n += PutPort(t.remote.port, p + n);
  return n;
}

SeqNum IsnGenerator::Next(const transport::FourTuple& t, Instant now) const {
  std::array<uint8_t, kMaxFourTupleBytes> buf;
  const size_t n = SerializeFourTuple(t, buf);
  const auto f = static_cast<uint32_t>(SipHash24(key_, {buf.data(), n}));
  // M: the 4-microsecond clock, floor(micros / 4) (an arithmetic shift, so
  // it keeps counting up across the epoch too), modulo 2^32.
  const auto m = static_cast<uint32_t>(absl::ToUnixMicros(now) >> 2);
  return SeqNum(m + f);
}

}  // namespace netstack::tcp
