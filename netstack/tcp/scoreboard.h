// The sender's record of what is in flight: one record per segment sent
// (a super-segment is one record until SACK blocks cut it), with its send
// time and SACKed / lost / retransmitted marks. It answers the questions
// loss recovery asks:
//   - the RFC 6675 "pipe" (bytes in flight),
//   - which bytes to retransmit next (the first lost, not yet resent),
//   - RACK (RFC 8985): which segments are lost by time, given the most
//     recently delivered segment's send time and a reordering window.
// Records live in a ring in sequence order; ACK processing touches only
// the records it removes or marks, and RACK walks from the oldest record
// and stops at the first original transmission newer than the reference.
#ifndef NETSTACK_TCP_SCOREBOARD_H_
#define NETSTACK_TCP_SCOREBOARD_H_

#include <cstdint>
#include <optional>
#include <span>

#include "netstack/base/ring.h"
#include "netstack/base/time.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp {

struct TxRecord {
  SeqNum start;
  SeqNum end;  // includes the FIN's sequence number if `fin`
  Instant xmit_time;
  bool sacked = false;
  bool lost = false;
  bool lost_retransmitted = false;  // resent since last marked lost
  bool retransmitted = false;       // ever resent
  bool fin = false;
  uint32_t len() const { return Span(start, end); }
};

struct AckResult {
  uint64_t acked_bytes = 0;     // cumulatively acked (incl. SACKed before)
  uint64_t newly_sacked = 0;    // bytes SACKed by this ACK's blocks
  uint64_t delivered = 0;       // newly delivered: acked not sacked + sacked
  // Send time of the newest delivered record never retransmitted, for an
  // RTT sample by Karn's rule; InfinitePast if none.
  Instant rtt_xmit = absl::InfinitePast();
  // A retransmitted record was delivered: rtt_xmit would be ambiguous
  // for the cumulative ACK (Karn), so only timestamps may give a sample.
  bool retransmitted_delivered = false;
  bool fin_acked = false;
  bool reordering = false;      // a hole below delivered data was filled
};

class Scoreboard {
 public:
  void Clear();
  bool empty() const { return recs_.empty(); }
  size_t size() const { return recs_.size(); }
  const TxRecord& front() const { return recs_.front(); }
  const TxRecord& back() const { return recs_.back(); }

  void OnSend(SeqNum start, SeqNum end, Instant now, bool fin);
  // Marks the record at index i as resent now.
  void OnRetransmit(size_t i, Instant now);
  // Cuts record i in two at `at` (inside it), so that a retransmission of
  // its first part is recorded for exactly the bytes that went out. The
  // marks are copied; a FIN stays with the second part.
  void SplitAt(size_t i, SeqNum at) { Split(i, at); }
  const TxRecord& at(size_t i) const { return recs_[i]; }

  // Processes a cumulative ACK and the segment's SACK blocks (already
  // validated to lie inside (una, snd_max]). Also updates the RACK
  // reference (most recently sent delivered record).
  // A retransmitted record updates RACK only if it was resent at least
  // min_rtt ago (RFC 8985 6.2 step 2: otherwise the ACK may be for the
  // original transmission).
  AckResult OnAck(SeqNum ack, std::span<const wire::TcpSackBlock> sacks,
                  Instant now, Duration min_rtt);

  // RFC 6675 IsLost for non-RACK operation: marks records with at least
  // `dupthresh_bytes` SACKed above them. Returns bytes newly marked.
  uint64_t MarkLostBySack(uint64_t dupthresh_bytes);
  // RACK loss detection (RFC 8985 6.2 step 5). Marks lost records;
  // returns the bytes newly marked and sets *timeout to when the next
  // record would become lost (kNever if none).
  uint64_t RackDetectLoss(Instant now, Duration reo_wnd, Instant* timeout);
  // Marks the first unsacked record lost (NewReno partial ACK, 3 dupacks).
  uint64_t MarkFirstLost();
  // At an RTO, before MarkAllLost: when the first record (the bytes at
  // SND.UNA) is SACKed, the receiver reneged on its SACKs (it may drop
  // SACKed data, RFC 2018 section 8) or they were never true, since a
  // receiver that holds the bytes at RCV.NXT acknowledges them. Forgets
  // every SACK mark, so all of it is resent (RFC 6675 section 5.1;
  // Linux's tcp_timeout_mark_lost makes the same test). Returns whether
  // it did.
  bool ForgetSacksIfReneged();
  // After an RTO: every record not SACKed is lost.
  uint64_t MarkAllLost();
  // A congestion response was undone: no record is lost after all.
  void ClearLost();
  // Index of the first lost record not yet resent; size() if none.
  // Amortised O(1): a cursor remembers where the last answer was, and
  // only marking a record lost below it moves it back.
  size_t NextLost() const;

  uint64_t sacked_bytes() const { return sacked_; }
  uint64_t lost_bytes() const { return lost_; }
  // RFC 6675 pipe: bytes believed in the network.
  uint64_t InFlight(SeqNum una, SeqNum snd_max) const {
    return Span(una, snd_max) - sacked_ - lost_ + lost_retx_;
  }
  // Highest sequence SACKed or acked.
  SeqNum fack() const { return fack_; }

  Duration rack_rtt() const { return rack_rtt_; }
  Instant rack_xmit() const { return rack_xmit_; }
  bool reordering_seen() const { return reordering_seen_; }
  void set_reordering_seen() { reordering_seen_ = true; }

 private:
  void Split(size_t i, SeqNum at);
  // Index of the record containing seq (records are contiguous).
  size_t Find(SeqNum seq) const;
  // `prior_fack`: the highest sequence delivered before this ACK; only a
  // record below it reveals reordering (a single ACK reports its blocks
  // newest first, so comparing within one ACK would see false reordering).
  void Deliver(const TxRecord& r, Instant now, Duration min_rtt,
               bool prior_set, SeqNum prior_fack, AckResult& res);
  void SetLost(TxRecord& r);

  Ring<TxRecord> recs_;
  uint64_t sacked_ = 0;
  uint64_t lost_ = 0;       // lost and not sacked
  uint64_t lost_retx_ = 0;  // lost, not sacked, resent
  SeqNum fack_;
  bool fack_set_ = false;
  Instant rack_xmit_ = absl::InfinitePast();
  SeqNum rack_end_;
  Duration rack_rtt_ = absl::ZeroDuration();
  bool reordering_seen_ = false;
  // No record that starts below this is lost and waiting to be resent
  // (NextLost's cursor; moved back by SetLost).
  mutable SeqNum next_lost_from_;
  mutable bool next_lost_from_set_ = false;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_SCOREBOARD_H_
