// The hostile out-of-order storm of issue #12 item 4, shared by its
// regression test and its benchmark: a peer sends `count` one-byte
// segments in a scrambled order into one connection, beyond a hole at
// RCV.NXT: each beyond a one-byte hole of its own (`holes`), or all
// adjacent (one run of `count` views, the case that made the old SACK
// code quadratic per ACK). The link gives every frame its own 64 KiB chunk and says so
// (Chunk::slot_size, as RxSlots does for GSO-sized receive slots), so
// each segment pins a whole chunk for as long as the receiver keeps it.
#ifndef NETSTACK_TCP_HOSTILE_OOO_H_
#define NETSTACK_TCP_HOSTILE_OOO_H_

#include <cstddef>
#include <cstdint>

#include "netstack/tcp/tcp_segment_harness.h"

namespace netstack::tcp::testing {

struct HostileOooResult {
  size_t segments = 0;
  // Chunks in use (the link's frames plus the stack's own pool: compact
  // chunks, packets), the most seen after any receive batch, in bytes.
  size_t peak_pinned_bytes = 0;
  size_t final_pinned_bytes = 0;
  uint32_t receive_buffer = 0;
  double seconds = 0;  // wall time of the storm (segments in, ACKs out)
  uint64_t acks = 0;   // segments the stack sent during the storm
  uint64_t pruned = 0;           // drop.tcp_ofo_pruned
  uint64_t memory_drops = 0;     // drop.tcp_receive_memory
  // After the storm the peer resends the whole range in order: bytes the
  // application then read, and whether they matched the pattern.
  size_t bytes_read = 0;
  bool data_ok = false;
};

// Runs the storm on a fresh harness (receive buffer `receive_buffer`,
// no auto-tuning) with batches of `batch` frames.
HostileOooResult RunHostileOoo(size_t count, uint32_t receive_buffer,
                               size_t batch = 64, bool holes = true);

}  // namespace netstack::tcp::testing

#endif  // NETSTACK_TCP_HOSTILE_OOO_H_
