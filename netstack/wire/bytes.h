// Big-endian loads and stores. Wire-format code reads every multi-byte
// field through these helpers and never casts bytes to a struct: packed
// structs break strict aliasing and alignment rules (see docs/WIRE.md).
#ifndef NETSTACK_WIRE_BYTES_H_
#define NETSTACK_WIRE_BYTES_H_

#include <cstddef>
#include <cstdint>

namespace netstack::wire {

inline uint16_t LoadBe16(const uint8_t* p) {
  return static_cast<uint16_t>((uint16_t{p[0]} << 8) | p[1]);
}

inline uint32_t LoadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) |
         (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

inline void StoreBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}

inline void StoreBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}

}  // namespace netstack::wire

#endif  // NETSTACK_WIRE_BYTES_H_
