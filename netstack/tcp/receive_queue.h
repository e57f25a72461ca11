// The receive side's data: bytes ready for the application (in order),
// and out-of-order segments waiting for a hole to fill, kept as views of
// the receive chunks (no copy until Read). Also produces the SACK blocks
// we report (RFC 2018 section 4: the block holding the most recent segment
// first, then the other most recently changed ones).
#ifndef NETSTACK_TCP_RECEIVE_QUEUE_H_
#define NETSTACK_TCP_RECEIVE_QUEUE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "netstack/base/ring.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp {

class ReceiveQueue {
 public:
  void Reset(SeqNum rcv_nxt) {
    ready_.clear();
    ooo_.clear();
    ready_bytes_ = 0;
    ooo_bytes_ = 0;
    rcv_nxt_ = rcv_nxt;
    recent_count_ = 0;
  }

  SeqNum rcv_nxt() const { return rcv_nxt_; }
  // For the FIN: the sequence space advances without data.
  void Advance(uint32_t n) { rcv_nxt_ += n; }

  // Adds a segment's payload that starts at `seq` (already trimmed to the
  // window by the caller; may overlap what we have). Returns the bytes
  // that became readable (in order).
  size_t Insert(SeqNum seq, buffer::PayloadView data);

  size_t ready_bytes() const { return ready_bytes_; }
  size_t ooo_bytes() const { return ooo_bytes_; }
  bool has_ooo() const { return !ooo_.empty(); }
  // The highest sequence held out of order (rcv_nxt if none).
  SeqNum ooo_end() const;

  size_t Read(std::span<uint8_t> out);
  size_t ReadViews(std::span<buffer::PayloadView> out, size_t max_bytes,
                   size_t* views);
  // Drops everything readable (SHUT_RD).
  void DiscardReady();

  // Up to out.size() SACK blocks, most recent first.
  size_t SackBlocks(std::span<wire::TcpSackBlock> out) const;

 private:
  struct Ooo {
    SeqNum start;
    buffer::PayloadView view;
    SeqNum end() const { return start + view.size(); }
  };
  void InsertOoo(SeqNum seq, buffer::PayloadView data);
  void NoteRecent(SeqNum seq);

  Ring<buffer::PayloadView> ready_;
  size_t ready_bytes_ = 0;
  std::vector<Ooo> ooo_;  // sorted by start, non-overlapping
  size_t ooo_bytes_ = 0;
  SeqNum rcv_nxt_;
  std::array<SeqNum, 4> recent_{};  // starts of recently received ooo data
  size_t recent_count_ = 0;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_RECEIVE_QUEUE_H_
