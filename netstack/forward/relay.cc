// The relay: two legs (fds), two directions (a -> b, b -> a), each moving
// its bytes through a pipe with splice(2) or through a user buffer with
// recv/send. Level-triggered on the event loop.
//
// One direction's state machine (Pump): flush what it holds to the
// destination until EAGAIN or empty; when empty, either forward the EOF
// (shutdown(SHUT_WR)) or pick the path for the next bytes; then fill from
// the source if there is room. The bytes a direction holds are counted
// (`in_pipe`, or the buffer's [head, tail)), never inferred from a call's
// result: an EAGAIN while writing leaves them where they are, and the next
// EPOLLOUT drains all of them.
//
// Interest per fd combines its two roles: EPOLLIN while the direction it
// feeds has room, EPOLLOUT while the direction it drains holds bytes. A
// splice into the pipe answers EAGAIN both for "socket empty" and for "pipe
// full" (its slots can fill before its byte capacity when the socket holds
// small skbs); with bytes in the pipe the relay takes the second reading and
// stops asking for EPOLLIN until the destination takes some, so that a full
// pipe never spins a level-triggered loop.
//
// EPOLLHUP is level-triggered and reported whatever the interest, so a
// hung-up fd leaves the loop. Reads on it no longer block (they return the
// queued bytes, then EOF) and writes fail at once, so the directions that
// use it are pumped directly from then on.
#include "netstack/forward/relay.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "netstack/base/dcheck.h"
#include "netstack/forward/relay_testing.h"

namespace netstack::forward {

namespace {

ssize_t RealSplice(int fd_in, int fd_out, size_t len, unsigned int flags) {
  return splice(fd_in, nullptr, fd_out, nullptr, len, flags);
}

testing::SpliceFunction g_splice = &RealSplice;

// SPLICE_F_MOVE is only a hint today; NONBLOCK keeps the pipe side from
// blocking (the sockets are O_NONBLOCK themselves).
constexpr unsigned int kSpliceFlags = SPLICE_F_NONBLOCK | SPLICE_F_MOVE;

// Fill/flush rounds per wake-up of a direction: fairness between
// connections on one loop. Level-triggered epoll brings the direction back
// for the rest.
constexpr int kMaxRoundsPerWake = 8;

// kAuto on splice: this many fills in a row, each starting from an empty
// pipe and each smaller than the threshold, move the direction back to
// copy (the stream has turned into small messages).
constexpr int kSmallReadsBeforeCopy = 4;

// kAuto, TCP source: a segment-size check covers this many fills (a
// getsockopt per 32 fills is noise).
constexpr int kFillsBetweenSegmentChecks = 32;

// A direction that had a pipe and found the pool empty when its source
// had bytes again copies this many fills before it asks again (each ask
// may cost pipe2 + fcntl + close when the kernel's budget is the limit).
constexpr int kFillsBeforePipeRetry = 16;

constexpr const char* kLegName[2] = {"a", "b"};

void IgnoreSigpipeIfDefault() {
  static const bool done = [] {
    struct sigaction old = {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 &&
        (old.sa_flags & SA_SIGINFO) == 0 && old.sa_handler == SIG_DFL) {
      struct sigaction ignore = {};
      ignore.sa_handler = SIG_IGN;
      sigemptyset(&ignore.sa_mask);
      sigaction(SIGPIPE, &ignore, nullptr);
    }
    return true;
  }();
  (void)done;
}

absl::Status MakeNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return absl::ErrnoToStatus(errno, "fcntl(F_GETFL)");
  if ((flags & O_NONBLOCK) == 0 &&
      fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, "fcntl(F_SETFL, O_NONBLOCK)");
  }
  return absl::OkStatus();
}

bool IsTcpSocket(int fd) {
  int protocol = 0;
  socklen_t len = sizeof(protocol);
  return getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &protocol, &len) == 0 &&
         protocol == IPPROTO_TCP;
}

// The segment size the kernel has measured on a TCP socket's receive side
// (tcp_measure_rcv_mss: raised to any larger segment, lowered to a smaller
// length only when two segments in a row have it), or 0 if it cannot say.
size_t ReceiveSegmentSize(int fd) {
  struct tcp_info info = {};
  socklen_t len = sizeof(info);
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return 0;
  return info.tcpi_rcv_mss;
}

// Best effort: a UNIX socket answers EOPNOTSUPP, which is fine, and a TCP
// socket that refuses is still a working leg.
void SetNoDelay(int fd) {
  const int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

namespace testing {

SpliceFunction SetSpliceFunctionForTesting(SpliceFunction fn) {
  SpliceFunction old = g_splice;
  g_splice = fn != nullptr ? fn : &RealSplice;
  return old;
}

}  // namespace testing

std::string_view RelayModeName(RelayMode mode) {
  switch (mode) {
    case RelayMode::kSplice:
      return "splice";
    case RelayMode::kCopy:
      return "copy";
    case RelayMode::kAuto:
      return "auto";
  }
  return "unknown";
}

std::optional<RelayMode> ParseRelayMode(std::string_view text) {
  if (text == "splice") return RelayMode::kSplice;
  if (text == "copy") return RelayMode::kCopy;
  if (text == "auto") return RelayMode::kAuto;
  return std::nullopt;
}

class Relay::Core {
 public:
  Core(eventloop::EventLoop& loop, PipePool& pipes, int fd_a, int fd_b,
       const RelayOptions& options, DoneCallback done);
  Core(const Core&) = delete;
  Core& operator=(const Core&) = delete;
  ~Core() { Teardown(); }

  absl::Status Register();
  void set_relay(Relay* relay) { relay_ = relay; }
  const RelayStats& stats() const { return stats_; }
  bool finished() const { return finished_; }

 private:
  enum class Path : uint8_t { kCopy, kSplice };

  struct Direction {
    int src = 0;  // leg index
    int dst = 0;
    DirectionStats* stats = nullptr;
    Path path = Path::kCopy;
    // kAuto: a copy read reached the threshold; switch once empty.
    bool want_splice = false;
    // EINVAL or no pipe: this direction copies from now on.
    bool splice_disabled = false;
    int small_reads = 0;  // kAuto on splice, see kSmallReadsBeforeCopy
    // kAuto on splice: the segments turned small; copy once empty.
    bool want_copy = false;
    // kAuto, TCP source: the last segment-size verdict and the fills it
    // still covers; a check that failed while splicing is final.
    bool segments_large = false;
    bool segments_vetoed = false;
    int fills_to_segment_check = 0;
    // The pool was empty when this direction (which had a pipe before)
    // needed one again: it copies, and asks again when the countdown ends.
    bool pipe_retry = false;
    int fills_to_pipe_retry = 0;

    std::optional<PipePool::Pipe> pipe;
    size_t in_pipe = 0;            // spliced in minus spliced out
    bool pipe_maybe_full = false;  // splice-in said EAGAIN with in_pipe > 0
    bool spliced_in = false;       // a splice-in ever moved a byte
    bool spliced_out = false;      // a splice-out ever moved a byte

    std::vector<char> buffer;  // the copy path's bytes are [head, tail)
    size_t head = 0;
    size_t tail = 0;

    bool src_eof = false;
    bool src_wait = false;  // the last read said EAGAIN: wait for EPOLLIN
    bool dst_wait = false;  // the last write said EAGAIN: wait for EPOLLOUT
    bool done = false;      // EOF forwarded with nothing left
  };

  class Leg final : public eventloop::Handler {
   public:
    Leg(Core* core, int index) : core_(core), index_(index) {}
    // Each callback's last act may destroy this Leg (through `done`).
    void OnReadable(Instant) override { core_->HandleReadable(index_); }
    void OnWritable(Instant) override { core_->HandleWritable(index_); }
    void OnError(Instant, uint32_t events) override {
      core_->HandleError(index_, events);
    }

    int fd = -1;
    uint32_t interest = 0;
    bool registered = false;
    bool hup = false;  // EPOLLHUP seen: out of the loop, pumped directly
    // kAuto with auto_splice_min_segment > 0 on a TCP socket: its segment
    // size decides as well.
    bool check_segments = false;

   private:
    Core* const core_;
    const int index_;
  };

  // Event entry points. Each ends with Settle(), whose last act may
  // destroy this Core.
  void HandleReadable(int leg);
  void HandleWritable(int leg);
  void HandleError(int leg, uint32_t events);
  void Settle();

  void Pump(Direction& d);
  // Each returns whether it moved bytes (or saw EOF), i.e. whether another
  // round may get further.
  bool Flush(Direction& d);
  bool Fill(Direction& d);
  bool SpliceIn(Direction& d);
  bool RecvIn(Direction& d);
  void ForwardEof(Direction& d);
  void ChoosePath(Direction& d);
  // kAuto, called per fill that counts: whether the source's segments are
  // large enough to splice (RelayOptions::auto_splice_min_segment). Always
  // true for a source without segments to check. For a TCP source, a
  // TCP_INFO check covers kFillsBetweenSegmentChecks calls; a check that
  // finds small segments counts in segment_vetoes, and one made while the
  // direction splices is final: it copies from then on.
  bool SegmentsLarge(Direction& d);
  // splice-out said EINVAL before any byte left through it: read what the
  // pipe holds into the buffer and go on copying.
  void MovePipeToBuffer(Direction& d);

  size_t Pending(const Direction& d) const {
    return d.path == Path::kSplice ? d.in_pipe : d.tail - d.head;
  }
  bool CanFill(const Direction& d) const;
  bool AcquirePipe(Direction& d);
  void ReleasePipe(Direction& d);
  void EnsureBuffer(Direction& d, size_t size);
  void UpdateInterest(int leg);
  void Unregister(int leg);

  // End the relay with an error on `leg` ("relay leg b (fd 7): send:
  // Broken pipe"); everything is closed.
  void Fail(int leg, int err, std::string_view what);
  void Fail(int leg, const absl::Status& status);
  // Ends the relay with `status` (OK: both directions done).
  void Finish(absl::Status status);
  // Unregisters and closes both fds, gives back the pipes. Idempotent.
  void Teardown();

  eventloop::EventLoop& loop_;
  PipePool& pipes_;
  const RelayOptions options_;
  const size_t threshold_;  // effective auto_splice_threshold
  DoneCallback done_;
  Relay* relay_ = nullptr;
  Leg legs_[2];
  Direction dirs_[2];  // [0]: a -> b, [1]: b -> a; dirs_[i].src == i
  RelayStats stats_;
  absl::Status status_;
  bool finished_ = false;
  bool done_called_ = false;
};

Relay::Core::Core(eventloop::EventLoop& loop, PipePool& pipes, int fd_a,
                  int fd_b, const RelayOptions& options, DoneCallback done)
    : loop_(loop),
      pipes_(pipes),
      options_(options),
      threshold_(std::max<size_t>(
          1, std::min(options.auto_splice_threshold,
                      std::max<size_t>(1, options.copy_buffer_size)))),
      done_(std::move(done)),
      legs_{Leg(this, 0), Leg(this, 1)} {
  legs_[0].fd = fd_a;
  legs_[1].fd = fd_b;
  if (options_.mode == RelayMode::kAuto &&
      options_.auto_splice_min_segment > 0) {
    for (Leg& leg : legs_) leg.check_segments = IsTcpSocket(leg.fd);
  }
  for (int i = 0; i < 2; ++i) {
    Direction& d = dirs_[i];
    d.src = i;
    d.dst = 1 - i;
    d.stats = i == 0 ? &stats_.a_to_b : &stats_.b_to_a;
    d.path = options_.mode == RelayMode::kSplice ? Path::kSplice : Path::kCopy;
  }
}

absl::Status Relay::Core::Register() {
  for (Leg& leg : legs_) {
    if (absl::Status s =
            loop_.Add(leg.fd, eventloop::EventLoop::kReadable, &leg);
        !s.ok()) {
      return s;  // ~Core unregisters the other leg and closes both
    }
    leg.registered = true;
    leg.interest = eventloop::EventLoop::kReadable;
  }
  return absl::OkStatus();
}

void Relay::Core::HandleReadable(int leg) {
  Direction& d = dirs_[leg];
  d.src_wait = false;
  Pump(d);
  Settle();
}

void Relay::Core::HandleWritable(int leg) {
  Direction& d = dirs_[1 - leg];
  d.dst_wait = false;
  Pump(d);
  Settle();
}

void Relay::Core::HandleError(int leg, uint32_t events) {
  if (finished_) return;
  if ((events & EPOLLERR) != 0) {
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(legs_[leg].fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) {
      err = errno;
    }
    if (err != 0 || (events & EPOLLHUP) == 0) {
      // Without a pending error EPOLLERR would only come back every turn.
      Fail(leg, err != 0 ? err : EIO, "socket error");
      Settle();
      return;
    }
  }
  if ((events & EPOLLHUP) != 0) {
    legs_[leg].hup = true;
    Unregister(leg);
    Direction& out = dirs_[leg];
    Direction& in = dirs_[1 - leg];
    out.src_wait = false;
    Pump(out);
    in.dst_wait = false;
    Pump(in);
  }
  Settle();
}

void Relay::Core::Settle() {
  if (!finished_) {
    if (dirs_[0].done && dirs_[1].done) {
      Finish(absl::OkStatus());
    } else {
      UpdateInterest(0);
      UpdateInterest(1);
    }
  }
  if (!finished_ || done_called_) return;
  done_called_ = true;
  DoneCallback done = std::move(done_);
  if (done) done(*relay_, status_);  // may destroy *this: nothing after it
}

void Relay::Core::Pump(Direction& d) {
  // A hung-up source is out of the loop: nothing would call us back for
  // it, so it is read until it blocks on the destination or ends.
  const bool bounded = !legs_[d.src].hup;
  for (int round = 0; !bounded || round < kMaxRoundsPerWake; ++round) {
    if (finished_ || d.done) return;
    bool progress = false;
    if (Pending(d) > 0 && !d.dst_wait) {
      progress |= Flush(d);
      if (finished_) return;
    }
    if (Pending(d) == 0) {
      if (d.src_eof) {
        ForwardEof(d);
        return;
      }
      ChoosePath(d);
    }
    if (!d.src_wait && CanFill(d)) {
      progress |= Fill(d);
      if (finished_) return;
    }
    if (!progress) return;
  }
  // Out of rounds: what is left is for the next wake-up, except an EOF
  // with nothing pending, which no event would bring back.
  if (!finished_ && !d.done && d.src_eof && Pending(d) == 0) ForwardEof(d);
}

bool Relay::Core::CanFill(const Direction& d) const {
  if (d.src_eof || d.done) return false;
  if (d.path == Path::kCopy) return Pending(d) == 0;
  if (!d.pipe.has_value()) return true;  // ChoosePath acquires it
  return d.in_pipe < d.pipe->capacity && !d.pipe_maybe_full;
}

bool Relay::Core::Fill(Direction& d) {
  if (d.path == Path::kSplice && !d.pipe.has_value()) ChoosePath(d);
  return d.path == Path::kSplice ? SpliceIn(d) : RecvIn(d);
}

bool Relay::Core::SpliceIn(Direction& d) {
  const bool was_empty = d.in_pipe == 0;
  const ssize_t n = g_splice(legs_[d.src].fd, d.pipe->write_fd,
                             d.pipe->capacity - d.in_pipe, kSpliceFlags);
  ++d.stats->splice_syscalls;
  if (n > 0) {
    d.in_pipe += static_cast<size_t>(n);
    d.spliced_in = true;
    if (options_.mode == RelayMode::kAuto) {
      if (was_empty) {
        d.small_reads =
            static_cast<size_t>(n) < threshold_ ? d.small_reads + 1 : 0;
      }
      if (!SegmentsLarge(d)) d.want_copy = true;  // copy once drained
    }
    return true;
  }
  if (n == 0) {
    d.src_eof = true;
    return true;
  }
  switch (errno) {
    case EINTR:
      return true;
    case EAGAIN:
      if (legs_[d.src].hup) {
        // A hung-up socket has nothing more to give.
        d.src_eof = true;
        return true;
      }
      if (was_empty) {
        // The pipe has room, so the socket is empty. An empty pipe goes
        // back to the pool until the source has bytes again.
        d.src_wait = true;
        ReleasePipe(d);
      } else {
        d.pipe_maybe_full = true;  // wait for the destination instead
      }
      return false;
    case EINVAL:
      if (!d.spliced_in) {
        // The source cannot splice (Go's fallback): copy instead, from
        // the first byte.
        d.stats->fell_back_einval = true;
        d.splice_disabled = true;
        ReleasePipe(d);
        d.path = Path::kCopy;
        return true;
      }
      [[fallthrough]];
    default:
      Fail(d.src, errno, "splice from socket");
      return false;
  }
}

bool Relay::Core::RecvIn(Direction& d) {
  EnsureBuffer(d, options_.copy_buffer_size);
  const ssize_t n =
      recv(legs_[d.src].fd, d.buffer.data(), d.buffer.size(), MSG_DONTWAIT);
  ++d.stats->copy_syscalls;
  if (n > 0) {
    d.head = 0;
    d.tail = static_cast<size_t>(n);
    if (d.fills_to_pipe_retry > 0) --d.fills_to_pipe_retry;
    if (options_.mode == RelayMode::kAuto && !d.splice_disabled &&
        !d.want_splice && static_cast<size_t>(n) >= threshold_) {
      // A UNIX source's large read is enough; a TCP source's must also
      // come from large segments.
      d.want_splice = SegmentsLarge(d);
    }
    return true;
  }
  if (n == 0) {
    d.src_eof = true;
    return true;
  }
  switch (errno) {
    case EINTR:
      return true;
    case EAGAIN:
      if (legs_[d.src].hup) {
        d.src_eof = true;
        return true;
      }
      d.src_wait = true;
      return false;
    default:
      Fail(d.src, errno, "recv");
      return false;
  }
}

bool Relay::Core::Flush(Direction& d) {
  bool progress = false;
  while (!finished_ && Pending(d) > 0) {
    const bool splicing = d.path == Path::kSplice;
    ssize_t n;
    if (splicing) {
      n = g_splice(d.pipe->read_fd, legs_[d.dst].fd, d.in_pipe, kSpliceFlags);
      ++d.stats->splice_syscalls;
    } else {
      n = send(legs_[d.dst].fd, d.buffer.data() + d.head, d.tail - d.head,
               MSG_NOSIGNAL | MSG_DONTWAIT);
      ++d.stats->copy_syscalls;
    }
    if (n > 0) {
      const size_t moved = static_cast<size_t>(n);
      progress = true;
      d.stats->bytes += moved;
      if (splicing) {
        d.in_pipe -= moved;
        d.pipe_maybe_full = false;
        d.spliced_out = true;
        d.stats->splice_bytes += moved;
      } else {
        d.head += moved;
        d.stats->copy_bytes += moved;
      }
      continue;
    }
    if (n == 0) {
      // Neither call returns 0 for a non-empty request on a stream socket.
      Fail(d.dst, absl::InternalError(
                      absl::StrCat(splicing ? "splice to socket" : "send",
                                   " returned 0 with bytes pending")));
      return progress;
    }
    const int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN && !legs_[d.dst].hup) {
      ++d.stats->would_block;
      d.dst_wait = true;
      break;
    }
    if (err == EINVAL && splicing && !d.spliced_out) {
      // The destination cannot take a splice (an O_APPEND socket does
      // this): the bytes in the pipe move to the buffer, in order.
      MovePipeToBuffer(d);
      continue;
    }
    Fail(d.dst, err == EAGAIN ? EPIPE : err,
         splicing ? "splice to socket" : "send");
    return progress;
  }
  if (d.path == Path::kCopy && d.head == d.tail) d.head = d.tail = 0;
  return progress;
}

void Relay::Core::MovePipeToBuffer(Direction& d) {
  EnsureBuffer(d, std::max(options_.copy_buffer_size, d.in_pipe));
  size_t got = 0;
  while (got < d.in_pipe) {
    const ssize_t n =
        read(d.pipe->read_fd, d.buffer.data() + got, d.in_pipe - got);
    ++d.stats->copy_syscalls;
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      // The pipe holds what we counted; anything else is a broken count.
      Fail(d.dst, n < 0 ? errno : EIO, "read back from pipe");
      return;
    }
  }
  d.head = 0;
  d.tail = got;
  d.in_pipe = 0;
  d.stats->fell_back_einval = true;
  d.splice_disabled = true;
  ReleasePipe(d);
  d.path = Path::kCopy;
}

void Relay::Core::ForwardEof(Direction& d) {
  // Only here: the source said EOF and the direction holds nothing, so the
  // FIN follows the last byte (passt sent it early once).
  if (shutdown(legs_[d.dst].fd, SHUT_WR) != 0 && errno != ENOTCONN) {
    Fail(d.dst, errno, "shutdown(SHUT_WR)");
    return;
  }
  d.done = true;
  d.stats->eof_forwarded = true;
  ReleasePipe(d);
  std::vector<char>().swap(d.buffer);
  d.head = d.tail = 0;
}

void Relay::Core::ChoosePath(Direction& d) {
  NETSTACK_DCHECK(Pending(d) == 0);
  if (options_.mode == RelayMode::kCopy) return;
  if (d.path == Path::kCopy && d.pipe_retry && d.fills_to_pipe_retry == 0 &&
      !d.splice_disabled) {
    d.pipe_retry = false;
    d.path = Path::kSplice;
  }
  if (options_.mode == RelayMode::kAuto) {
    if (d.path == Path::kCopy && d.want_splice && !d.splice_disabled) {
      d.want_splice = false;
      d.path = Path::kSplice;
      d.small_reads = 0;
    } else if (d.path == Path::kSplice &&
               (d.small_reads >= kSmallReadsBeforeCopy || d.want_copy)) {
      ReleasePipe(d);
      d.path = Path::kCopy;
      d.small_reads = 0;
      d.want_copy = false;
      return;
    }
  }
  // On the splice path the pipe is taken only for bytes to move (a
  // released one is back in the pool while the source is idle).
  if (d.path == Path::kSplice && !d.pipe.has_value() && !d.src_wait &&
      !AcquirePipe(d)) {
    d.path = Path::kCopy;
    if (d.stats->pipe_acquires == 0) {
      // Never had one: the pool cannot grow (pipe-user-pages-soft, fd
      // limits, max_pipes). Copy from now on.
      d.stats->fell_back_no_pipe = true;
      d.splice_disabled = true;
    } else {
      // Other connections hold the pipes for now: copy a while.
      ++d.stats->pipe_shortages;
      d.pipe_retry = true;
      d.fills_to_pipe_retry = kFillsBeforePipeRetry;
    }
  }
}

bool Relay::Core::SegmentsLarge(Direction& d) {
  if (!legs_[d.src].check_segments) return true;
  if (d.segments_vetoed) return false;
  if (d.fills_to_segment_check > 0) {
    --d.fills_to_segment_check;
    return d.segments_large;
  }
  d.fills_to_segment_check = kFillsBetweenSegmentChecks;
  d.segments_large =
      ReceiveSegmentSize(legs_[d.src].fd) >= options_.auto_splice_min_segment;
  if (!d.segments_large) {
    ++d.stats->segment_vetoes;
    // Small segments while splicing: the writer turned to small writes,
    // or (what the benchmark saw) its small writes had only looked large
    // while coalesced, and splicing them tipped writer, relay and reader
    // into the state where every write is its own segment. Copy for good.
    if (d.path == Path::kSplice) d.segments_vetoed = true;
  }
  return d.segments_large;
}

bool Relay::Core::AcquirePipe(Direction& d) {
  if (d.pipe.has_value()) return true;
  d.pipe = pipes_.Acquire();
  d.in_pipe = 0;
  d.pipe_maybe_full = false;
  if (!d.pipe.has_value()) return false;
  ++d.stats->pipe_acquires;
  return true;
}

void Relay::Core::ReleasePipe(Direction& d) {
  if (!d.pipe.has_value()) return;
  pipes_.Release(*d.pipe, d.in_pipe);
  d.pipe.reset();
  d.in_pipe = 0;
  d.pipe_maybe_full = false;
}

void Relay::Core::EnsureBuffer(Direction& d, size_t size) {
  size = std::max<size_t>(size, 1);
  if (d.buffer.size() < size) d.buffer.resize(size);
}

void Relay::Core::UpdateInterest(int leg) {
  Leg& l = legs_[leg];
  if (finished_ || !l.registered) return;
  const Direction& out = dirs_[leg];     // this fd is its source
  const Direction& in = dirs_[1 - leg];  // this fd is its destination
  const bool reading_over = out.done || out.src_eof;
  if (reading_over && in.done) {
    // Nothing more to read or write here: out of the loop, so that a
    // later EPOLLHUP (the peer's FIN after ours) cannot spin it.
    Unregister(leg);
    return;
  }
  uint32_t want = 0;
  if (!reading_over && CanFill(out)) want |= eventloop::EventLoop::kReadable;
  if (!in.done && Pending(in) > 0) want |= eventloop::EventLoop::kWritable;
  if (want == l.interest) return;
  if (absl::Status s = loop_.Modify(l.fd, want); !s.ok()) {
    Fail(leg, s);
    return;
  }
  l.interest = want;
}

void Relay::Core::Unregister(int leg) {
  Leg& l = legs_[leg];
  if (!l.registered) return;
  l.registered = false;
  l.interest = 0;
  // Remove cannot fail for a registered fd in a way we could act on.
  (void)loop_.Remove(l.fd);
}

void Relay::Core::Fail(int leg, int err, std::string_view what) {
  Finish(absl::ErrnoToStatus(
      err, absl::StrCat("relay leg ", kLegName[leg], " (fd ", legs_[leg].fd,
                        "): ", std::string(what))));
}

void Relay::Core::Fail(int leg, const absl::Status& status) {
  Finish(absl::Status(
      status.ok() ? absl::StatusCode::kInternal : status.code(),
      absl::StrCat("relay leg ", kLegName[leg], " (fd ", legs_[leg].fd,
                   "): ", std::string(status.message()))));
}

void Relay::Core::Finish(absl::Status status) {
  if (finished_) return;
  status_ = std::move(status);
  Teardown();
  finished_ = true;
}

void Relay::Core::Teardown() {
  for (int i = 0; i < 2; ++i) {
    Unregister(i);
    if (legs_[i].fd >= 0) {
      close(legs_[i].fd);
      legs_[i].fd = -1;
    }
  }
  for (Direction& d : dirs_) {
    ReleasePipe(d);  // closed, not pooled, if it still holds bytes
    std::vector<char>().swap(d.buffer);
    d.head = d.tail = 0;
  }
}

absl::StatusOr<std::unique_ptr<Relay>> Relay::Create(
    eventloop::EventLoop& loop, PipePool& pipes, int fd_a, int fd_b,
    const RelayOptions& options, DoneCallback done) {
  auto close_both = [&] {
    if (fd_a >= 0) close(fd_a);
    if (fd_b >= 0 && fd_b != fd_a) close(fd_b);
  };
  if (fd_a < 0 || fd_b < 0 || fd_a == fd_b) {
    close_both();
    return absl::InvalidArgumentError(
        "Relay::Create: needs two distinct valid fds");
  }
  for (int fd : {fd_a, fd_b}) {
    if (absl::Status s = MakeNonBlocking(fd); !s.ok()) {
      close_both();
      return s;
    }
    if (options.tcp_nodelay) SetNoDelay(fd);
  }
  IgnoreSigpipeIfDefault();
  auto core =
      std::make_unique<Core>(loop, pipes, fd_a, fd_b, options, std::move(done));
  // On failure ~Core removes what was added and closes both fds.
  if (absl::Status s = core->Register(); !s.ok()) return s;
  auto relay = std::unique_ptr<Relay>(new Relay(std::move(core)));
  relay->core_->set_relay(relay.get());
  return relay;
}

Relay::Relay(std::unique_ptr<Core> core) : core_(std::move(core)) {}

Relay::~Relay() = default;

const RelayStats& Relay::stats() const { return core_->stats(); }

bool Relay::finished() const { return core_->finished(); }

}  // namespace netstack::forward
