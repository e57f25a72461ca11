// A UDP socket's receive queue: whole datagrams in arrival order, each a
// PayloadView that shares the received frame's chunk (no copy until the
// application reads), bounded in bytes like SO_RCVBUF.
//
// Memory accounting. A queued view keeps its whole chunk alive, and a
// received frame's chunk is shared with the other frames of its batch, so
// counting only payload bytes would let a flood of empty datagrams pin the
// chunk pool. Each datagram is therefore charged its payload plus
// kEntryOverhead (the queue slot, the frame's headers and its receive
// slot's slack), as Linux charges an skb's truesize rather than its
// length. With the default 256 KiB that is 512 empty datagrams, or 128 of
// 1472 bytes.
//
// A datagram is accepted while the charged total stays within the limit,
// and always when the queue is empty, so one datagram larger than a small
// limit is still deliverable (Linux lets the queue exceed SO_RCVBUF by one
// datagram for the same reason).
//
// The ring grows by doubling when full and never shrinks, so after warm-up
// Push and Pop do not touch the heap.
#ifndef NETSTACK_UDP_DATAGRAM_QUEUE_H_
#define NETSTACK_UDP_DATAGRAM_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "netstack/buffer/payload_view.h"
#include "netstack/transport/address.h"

namespace netstack::udp {

class DatagramQueue {
 public:
  static constexpr size_t kEntryOverhead = 512;
  static constexpr size_t kDefaultLimit = 256 * 1024;

  struct Entry {
    buffer::PayloadView payload;
    transport::SocketAddress from;
  };

  explicit DatagramQueue(size_t limit_bytes = kDefaultLimit)
      : limit_(limit_bytes) {}
  DatagramQueue(const DatagramQueue&) = delete;
  DatagramQueue& operator=(const DatagramQueue&) = delete;

  static size_t Charge(size_t payload_len) {
    return payload_len + kEntryOverhead;
  }

  // Appends the datagram; false (nothing changed) when it does not fit.
  [[nodiscard]] bool Push(buffer::PayloadView payload,
                          const transport::SocketAddress& from);
  // The oldest datagram; the queue must not be empty (DCHECK).
  const Entry& Front() const;
  // Removes and returns the oldest datagram; must not be empty (DCHECK).
  Entry Pop();
  // Drops every datagram (their chunk references go back).
  void Clear();

  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // Charged bytes of the queued datagrams.
  size_t bytes() const { return bytes_; }
  size_t limit() const { return limit_; }
  // A lower limit does not drop what is queued; it stops new datagrams
  // until the queue drains below it.
  void set_limit(size_t limit_bytes) { limit_ = limit_bytes; }
  // Ring slots allocated so far (for tests of the no-allocation claim).
  size_t capacity() const { return ring_.size(); }

 private:
  void Grow();

  std::vector<Entry> ring_;
  size_t head_ = 0;   // index of the oldest entry
  size_t count_ = 0;  // entries in use
  size_t bytes_ = 0;  // sum of Charge() over the entries
  size_t limit_;
};

}  // namespace netstack::udp

#endif  // NETSTACK_UDP_DATAGRAM_QUEUE_H_
