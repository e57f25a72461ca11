// The receive side's data: bytes ready for the application (in order),
// and out-of-order data waiting for a hole to fill, kept as views of the
// receive chunks (no copy until Read, except when collapsing under memory
// pressure). Also produces the SACK blocks we report (RFC 2018 section 4).
//
// Out-of-order data is kept as runs: maximal [start, end) intervals of
// held bytes, in a tree keyed by start, each with its views in sequence
// order. Inserting a segment costs O(log runs + runs it touches); a SACK
// block costs O(log runs).
//
// Memory (docs/TCP.md "Receive memory"): every view is charged what it
// pins, as Linux charges skb truesize to sk_rmem_alloc: its receive slot
// (Chunk::slot_size) if larger than its bytes, plus kViewOverhead for the
// queue's own node. Over the limit the queue first collapses wasteful
// views (copies them into the layer's shared compact arena, so that
// contiguous data becomes one view: tcp_collapse), then prunes
// out-of-order data from the highest sequence down (tcp_prune_ofo_queue),
// then refuses the segment. An out-of-order segment of a few bytes in a
// big receive slot is copied at once, whatever the limit: it may wait
// long for its hole, and the slot is a whole chunk of the link's.
#ifndef NETSTACK_TCP_RECEIVE_QUEUE_H_
#define NETSTACK_TCP_RECEIVE_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "boost/intrusive/list.hpp"
#include "boost/intrusive/set.hpp"
#include "netstack/buffer/chunk.h"
#include "netstack/buffer/chunk_arena.h"
#include "netstack/buffer/payload_view.h"
#include "netstack/tcp/seqnum.h"
#include "netstack/wire/tcp.h"

namespace netstack::tcp {

// What one view costs the queue beyond the memory it pins: its node here
// (about 80 bytes) and its share of a run's node, rounded up.
inline constexpr uint32_t kViewOverhead = 128;

class ReceiveQueue {
 public:
  ReceiveQueue() = default;
  ReceiveQueue(const ReceiveQueue&) = delete;
  ReceiveQueue& operator=(const ReceiveQueue&) = delete;
  ~ReceiveQueue();

  void Reset(SeqNum rcv_nxt);

  // The pool the received views come from (its pressure halves the
  // limit), the arena compact copies go into (shared by the layer's
  // queues, so a queue holding a few copied bytes pins no chunk of its
  // own), and the most the held views may be charged. Without an arena
  // the queue never collapses.
  void SetMemory(buffer::ChunkPool* pool, buffer::ChunkArena* arena,
                 size_t limit) {
    pool_ = pool;
    arena_ = arena;
    limit_ = limit;
  }

  SeqNum rcv_nxt() const { return rcv_nxt_; }
  // For the FIN: the sequence space advances without data.
  void Advance(uint32_t n) { rcv_nxt_ += n; }

  struct InsertResult {
    size_t readable = 0;       // bytes that became readable (in order)
    bool new_run = false;      // a new out-of-order run appeared
    bool filled_hole = false;  // bytes went below held out-of-order data
    bool dropped = false;      // over the memory limit even after pruning
    uint32_t pruned = 0;       // out-of-order views pruned to make room
    // The first part of the segment we already held (RFC 2883 D-SACK).
    bool duplicate = false;
    wire::TcpSackBlock dup{};
  };
  // Adds a segment's payload that starts at `seq` (already trimmed to the
  // window by the caller; may overlap what we have).
  [[nodiscard]] InsertResult Insert(SeqNum seq, buffer::PayloadView data);

  size_t ready_bytes() const { return ready_bytes_; }
  size_t ooo_bytes() const { return ooo_bytes_; }
  bool has_ooo() const { return !runs_.empty(); }
  size_t run_count() const { return runs_.size(); }
  // The highest sequence held out of order (rcv_nxt if none).
  SeqNum ooo_end() const;
  // What the held views are charged (bytes of memory they pin).
  size_t charge() const { return charge_; }
  // Views copied into compact chunks so far.
  uint64_t collapsed() const { return collapsed_; }

  size_t Read(std::span<uint8_t> out);
  size_t ReadViews(std::span<buffer::PayloadView> out, size_t max_bytes,
                   size_t* views);
  // Drops everything readable (SHUT_RD).
  void DiscardReady();

  // Fills up to out.size() SACK blocks (RFC 2018 section 4): first the run
  // holding the most recently received segment, then the run next to
  // rcv_nxt (the lowest), then the others in turn, starting after the
  // last one reported by the previous call, so that every run is repeated
  // in successive ACKs.
  size_t SackBlocks(std::span<wire::TcpSackBlock> out);
  // How many blocks SackBlocks would fill with `room` (no side effect).
  size_t SackBlockCount(size_t room) const {
    return runs_.size() < room ? runs_.size() : room;
  }

 private:
  using AutoUnlink = boost::intrusive::link_mode<boost::intrusive::auto_unlink>;
  struct Piece {
    SeqNum seq;
    // The slot bytes this view is charged for (0: charged its bytes).
    uint32_t slot = 0;
    buffer::PayloadView view;
    boost::intrusive::list_member_hook<AutoUnlink> hook;   // run or ready_
    boost::intrusive::list_member_hook<AutoUnlink> waste;  // in wasteful_
    SeqNum end() const { return seq + view.size(); }
    size_t Charge() const {
      return (view.size() > slot ? view.size() : slot) + size_t{kViewOverhead};
    }
  };
  template <auto Hook>
  using PieceListOf = boost::intrusive::list<
      Piece,
      boost::intrusive::member_hook<
          Piece, boost::intrusive::list_member_hook<AutoUnlink>, Hook>,
      boost::intrusive::constant_time_size<false>>;
  using PieceList = PieceListOf<&Piece::hook>;
  using WasteList = PieceListOf<&Piece::waste>;

  struct Run {
    SeqNum start;
    SeqNum end;
    PieceList pieces;
    boost::intrusive::set_member_hook<> node;
  };
  struct RunLess {
    bool operator()(const Run& a, const Run& b) const {
      return a.start < b.start;
    }
    bool operator()(SeqNum a, const Run& b) const { return a < b.start; }
    bool operator()(const Run& a, SeqNum b) const { return a.start < b; }
  };
  using RunTree = boost::intrusive::set<
      Run,
      boost::intrusive::member_hook<Run, boost::intrusive::set_member_hook<>,
                                    &Run::node>,
      boost::intrusive::compare<RunLess>>;

  // Node pools: nodes are recycled, so a warmed-up queue does not touch
  // the heap.
  Piece* NewPiece(SeqNum seq, buffer::PayloadView view, uint32_t slot);
  void FreePiece(Piece* p);  // unlinks it, drops its view and charge
  Run* NewRun(SeqNum start);
  void FreeRun(Run* r);  // erases it from runs_ (must be empty)

  // Places the bytes of [seq, seq + data.size()) we do not hold yet into
  // runs_, merging the runs they touch.
  void InsertIntoRuns(SeqNum seq, const buffer::PayloadView& data,
                      uint32_t slot, InsertResult* res);
  // Moves the run at rcv_nxt (if any) to ready_.
  size_t PullReady();

  // Memory. Makes room for a view of `len` bytes charged `charge` at
  // `seq`; may replace `data` by a compact copy. False: no room.
  bool MakeRoom(SeqNum seq, buffer::PayloadView& data, uint32_t& slot,
                InsertResult* res);
  size_t Limit() const;
  bool OverLimit(size_t extra) const { return charge_ + extra > Limit(); }
  // Copies every wasteful view into compact chunks.
  void Collapse();
  // Replaces `data` by a copy in the arena (its slot becomes 0, counted
  // in collapsed_); false, leaving both, if no chunk could be had (only
  // the pool's receive reserve left).
  bool Compact(buffer::PayloadView& data, uint32_t& slot);
  // Removes out-of-order views from the top while over the limit and
  // above `seq`.
  uint32_t PruneAbove(SeqNum seq, size_t extra);

  PieceList ready_;
  size_t ready_bytes_ = 0;
  RunTree runs_;
  size_t ooo_bytes_ = 0;
  SeqNum rcv_nxt_;
  // Start of the most recent out-of-order segment, and where the rotation
  // of the other SACK blocks stands.
  SeqNum recent_;
  bool recent_set_ = false;
  SeqNum rotate_after_;

  buffer::ChunkPool* pool_ = nullptr;
  size_t limit_ = 0;  // 0: no limit
  size_t charge_ = 0;
  WasteList wasteful_;  // views worth copying, oldest first
  buffer::ChunkArena* arena_ = nullptr;
  // The piece whose view is this queue's last compact copy (extended
  // when the next copy follows it in the arena).
  Piece* compact_last_ = nullptr;
  uint64_t collapsed_ = 0;

  PieceList free_pieces_;
  std::vector<Run*> free_runs_;
};

}  // namespace netstack::tcp

#endif  // NETSTACK_TCP_RECEIVE_QUEUE_H_
