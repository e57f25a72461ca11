// TIME_WAIT (RFC 9293 3.10.7.4) as a compact record, not a whole
// Connection: when a connection reaches TIME_WAIT the layer keeps only
// what the state still needs (Linux's inet_timewait_sock idea), in a table
// of its own, and frees the Connection.
//
// What TIME_WAIT still does, and what it needs for it:
//   - ACK a retransmitted FIN and restart 2 MSL: the tuple, SND.NXT,
//     RCV.NXT, our window field and TS clock offset, TS.Recent;
//   - keep RFC 1337 (a RST does not end it): nothing;
//   - let a newer SYN reopen the tuple (RFC 6191; the rule is Linux's,
//     see TimeWaitEntry::AcceptsSyn): RCV.NXT and TS.Recent;
//   - end at its 2 MSL deadline: the deadline and a list hook.
//
// Expiry: the table keeps its entries in a list ordered by deadline
// (an entry restarted by a FIN moves to its place, which is the tail when
// every connection has the same MSL), so the next deadline is the head's
// and expiry pops from the front: O(1) per entry, no Timer per entry.
#ifndef NETSTACK_TCP_TIME_WAIT_H_
#define NETSTACK_TCP_TIME_WAIT_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/node_hash_map.h"
#include "boost/intrusive/list.hpp"
#include "netstack/base/time.h"
#include "netstack/tcp/segment.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/transport/address.h"

namespace netstack::tcp {

struct TimeWaitEntry {
  transport::FourTuple tuple;
  SeqNum snd_nxt;  // after our FIN: the SEG.SEQ of our ACKs
  SeqNum rcv_nxt;  // after the peer's FIN
  uint32_t ts_recent = 0;
  uint32_t ts_offset = 0;  // our TSval = ms clock + this (the connection's)
  uint32_t two_msl_ms = 0;
  uint16_t window = 0;  // the window field of our ACKs
  bool ts_ok = false;
  Instant deadline = kNever;
  Instant last_oow_ack = absl::InfinitePast();  // ACK rate limit
  boost::intrusive::list_member_hook<> hook;

  // PAWS (RFC 7323 5.3) as Linux's tcp_timewait_state_process applies it:
  // only when both the connection and the segment carry timestamps.
  bool PawsRejects(const Segment& seg) const;
  // A SYN that may reopen the tuple. Linux net/ipv4/tcp_minisocks.c,
  // tcp_timewait_state_process(): a SYN without ACK or RST, that PAWS does
  // not reject, and either
  //   after(SEG.SEQ, RCV.NXT), or
  //   it carries a timestamp and TSval is after TS.Recent.
  // So a SYN without a timestamp, or with TSval == TS.Recent, is taken on
  // its sequence number (RFC 6191 section 2 says the same); one with an
  // older TSval is refused whatever its sequence number.
  bool AcceptsSyn(const Segment& seg) const;
  // RFC 1122 4.2.2.13: the new incarnation's ISS is above every sequence
  // number the old one used; Linux takes snd_nxt + 65535 + 2.
  SeqNum ReopenIss() const { return snd_nxt + (65535u + 2u); }
};

class TimeWaitTable {
 public:
  explicit TimeWaitTable(size_t limit) : limit_(limit) {}
  TimeWaitTable(const TimeWaitTable&) = delete;
  TimeWaitTable& operator=(const TimeWaitTable&) = delete;
  ~TimeWaitTable() { list_.clear(); }

  // nullptr if the tuple is not in TIME_WAIT.
  TimeWaitEntry* Find(const transport::FourTuple& t);
  bool Contains(const transport::FourTuple& t) const {
    return map_.contains(t);
  }
  // Adds `e` (deadline now + 2 MSL). nullptr if the table is full (or the
  // tuple already there, which the layer never does).
  TimeWaitEntry* Insert(const TimeWaitEntry& e, Instant now);
  // 2 MSL again from `now` (RFC 9293: a retransmitted FIN).
  void Restart(TimeWaitEntry& e, Instant now);
  void Erase(TimeWaitEntry& e);
  // Removes every entry whose deadline is <= now; returns how many.
  size_t Expire(Instant now);
  Instant NextDeadline() const {
    return list_.empty() ? kNever : list_.front().deadline;
  }
  size_t size() const { return map_.size(); }
  size_t limit() const { return limit_; }

 private:
  using List = boost::intrusive::list<
      TimeWaitEntry,
      boost::intrusive::member_hook<TimeWaitEntry,
                                    boost::intrusive::list_member_hook<>,
                                    &TimeWaitEntry::hook>>;
  // Links `e` in deadline order, searching from the tail.
  void Link(TimeWaitEntry& e);

  size_t limit_;
  // Node map: entries do not move, so the list can link them.
  absl::node_hash_map<transport::FourTuple, TimeWaitEntry> map_;
  List list_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_TIME_WAIT_H_
