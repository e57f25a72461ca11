// Relay: moves bytes both ways between two host stream sockets (TCP <->
// TCP, UNIX <-> TCP, IPv4 and IPv6) on the event loop, through a pipe with
// splice(2) so the payload never enters user memory, with a recv/send copy
// path where splice loses or cannot work.
//
// Lessons this design keeps (../shared/DESIGN.md, "Lessons from the
// anchors"):
//   - one pipe per busy direction, from a pool (taken when bytes arrive,
//     given back once drained and idle); F_SETPIPE_SZ up to 1 MiB,
//     falling back to what the kernel grants;
//   - the bytes in each pipe are counted (spliced in minus spliced out); an
//     EAGAIN on the write side does not mean the pipe is empty, and after an
//     EPOLLOUT wake-up the whole pipe is drained, not just the last read
//     (passt lost ~97 KB of a podman pull this way);
//   - a half-close (FIN) is forwarded only after its pipe has drained;
//   - a pipe that still holds data never goes back to the pool (Go);
//   - on EINVAL before any byte moved, and when the pool cannot grow
//     (pipe-user-pages-soft), the direction falls back to copying; the
//     connection never fails for either reason;
//   - TCP_NODELAY on both legs (Nagle added 40 ms stalls in passt).
#ifndef NETSTACK_FORWARD_RELAY_H_
#define NETSTACK_FORWARD_RELAY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/eventloop/event_loop.h"

namespace netstack::forward {

enum class RelayMode : uint8_t {
  kSplice,  // always splice (falls back to copy only for the reasons above)
  kCopy,    // always recv/send through a user buffer
  kAuto,    // copy for small transfers, splice for large (see RelayOptions)
};
std::string_view RelayModeName(RelayMode mode);
std::optional<RelayMode> ParseRelayMode(std::string_view text);

// The default of RelayOptions::auto_splice_threshold; see there.
inline constexpr size_t kDefaultAutoSpliceThreshold = 16 * 1024;
// The default of RelayOptions::auto_splice_min_segment; see there.
inline constexpr size_t kDefaultAutoSpliceMinSegment = 32 * 1024;

struct RelayOptions {
  RelayMode mode = RelayMode::kAuto;
  // kAuto: a direction moves to splice once a single read returned at
  // least this many bytes (data arrives in large chunks: splice wins), and
  // stays on copy while reads are smaller (small messages: one recv+send
  // beats splice in + splice out, as HAProxy found). The default is the
  // crossover measured by //bench:splice_benchmark (docs/BENCHMARKS.md).
  // A threshold above copy_buffer_size acts as copy_buffer_size (a full
  // buffer counts).
  //
  // How it decides before any data arrives: every direction starts on
  // copy, so its first recv() is the measurement. The switch to splice
  // happens only once the user buffer has been sent completely, so bytes
  // never overtake each other. On splice, four fills in a row that each
  // start from an empty pipe and bring less than the threshold move the
  // direction back to copy (bulk turned into small messages).
  size_t auto_splice_threshold = kDefaultAutoSpliceThreshold;
  // kAuto, TCP sources only: a large read is not enough, because TCP
  // queues a writer's small segments while the relay is busy and the next
  // recv() takes them all. The direction also needs the segment size the
  // kernel measured on the source socket (TCP_INFO tcpi_rcv_mss) to reach
  // this. Splicing small segments costs more than copying them: each one
  // takes a pipe slot and becomes one small page fragment on the way out,
  // and it pins the local writer's page while it sits in the pipe. A check
  // covers 32 fills (on copy only reads that reach the threshold count).
  // One that finds small segments while the direction splices is final:
  // the direction copies from then on. (A stream of small writes shows
  // large segments while the relay lags and the writer's queue coalesces
  // them; splicing those tipped writer, relay and reader into the state
  // where every write is its own segment: docs/BENCHMARKS.md, "Splice
  // relay".) A remote peer's segments are its MSS (1448 bytes on
  // Ethernet), so in kAuto such a source is copied; kSplice forces the
  // pipe. tcpi_rcv_mss falls only when two segments in a row share a
  // smaller length, so small request/response traffic is left to the
  // small-reads rule above. 0 turns the check off (no getsockopt).
  size_t auto_splice_min_segment = kDefaultAutoSpliceMinSegment;
  // User buffer of the copy path, per direction.
  size_t copy_buffer_size = 64 * 1024;
  bool tcp_nodelay = true;
};

struct DirectionStats {
  uint64_t bytes = 0;         // delivered to the destination socket
  uint64_t splice_bytes = 0;  // of which through the pipe
  uint64_t copy_bytes = 0;    // of which through the user buffer
  uint64_t splice_syscalls = 0;
  uint64_t copy_syscalls = 0;      // recv/send (read/write)
  uint64_t would_block = 0;        // writes that returned EAGAIN
  uint64_t segment_vetoes = 0;     // kAuto: checks that found TCP segments
                                   //   too small to splice
  uint64_t pipe_acquires = 0;      // pipes taken from the pool (see Relay)
  uint64_t pipe_shortages = 0;     // a pipe was needed again and the pool had
                                   //   none: copied a while, then asked again
  bool fell_back_einval = false;   // splice said EINVAL before any byte
  bool fell_back_no_pipe = false;  // no pipe the first time: copies for good
  bool eof_forwarded = false;      // shutdown(SHUT_WR) sent after draining
};

struct RelayStats {
  DirectionStats a_to_b;
  DirectionStats b_to_a;
};

// A bounded pool of pipes sized with F_SETPIPE_SZ. Not thread-safe: one
// pool per event loop.
//
// Acquire() fails (nullopt, stats().acquire_failed) when max_pipes pipes
// are in use, when pipe2() fails (EMFILE, ENFILE, ENOMEM), and when the
// kernel hands out a pipe smaller than its default 16 pages (and smaller
// than pipe_size): that is the sign of pipe-user-pages-soft being reached,
// and such a pipe would move less per splice than the copy buffer.
class PipePool {
 public:
  struct Options {
    size_t max_pipes = 4096;
    size_t pipe_size = size_t{1} << 20;  // asked for; the kernel may refuse
  };
  struct Pipe {
    int read_fd = -1;
    int write_fd = -1;
    size_t capacity = 0;  // what F_SETPIPE_SZ granted (or the default)
  };
  struct Stats {
    uint64_t created = 0;
    uint64_t reused = 0;
    uint64_t closed_with_data = 0;  // released non-empty: closed, not pooled
    uint64_t acquire_failed = 0;    // limit, EMFILE/ENFILE, or user pages
    uint64_t resize_refused = 0;    // got less than pipe_size
    uint64_t trimmed = 0;           // idle pipes closed by Trim
    size_t in_use = 0;
    size_t pooled = 0;
  };

  explicit PipePool(Options options);
  PipePool(const PipePool&) = delete;
  PipePool& operator=(const PipePool&) = delete;
  ~PipePool();  // closes the pooled pipes

  // A pipe, or nullopt when the pool cannot grow: the caller copies.
  std::optional<Pipe> Acquire();
  // Gives a pipe back. `bytes_in_pipe` must be 0 for it to be pooled;
  // otherwise it is closed (its data belongs to a dead connection).
  void Release(Pipe pipe, size_t bytes_in_pipe);
  // Closes pooled (idle) pipes until at most `keep` remain; returns how
  // many it closed. Pipes in use are not touched, so this is safe at any
  // time, e.g. from an idle timer: an idle pipe still counts its full size
  // against the user's pipe-user-pages-soft, which every process of the
  // user shares.
  size_t Trim(size_t keep = 0);
  const Stats& stats() const { return stats_; }

 private:
  static void Close(const Pipe& pipe);

  const Options options_;
  std::vector<Pipe> pooled_;
  Stats stats_;
};

class Relay {
 public:
  // Runs once, on the loop, when the relay is finished: both directions
  // forwarded their EOF with empty pipes (OK), or an error on one leg
  // closed both (the status names the leg and the errno). `done` may
  // destroy the Relay. By then both fds are closed (each exactly once) and
  // the pipes are back in the pool (or closed, if they held data).
  using DoneCallback = absl::AnyInvocable<void(Relay& relay, absl::Status)>;

  // A direction on the splice path holds a pipe only while it has bytes
  // to move: it takes one from the pool when its source turns readable and
  // gives it back when the pipe has drained and the source has nothing
  // more, so idle connections hold no pipes. Taking a pooled pipe costs no
  // system call; giving one back costs one FIONREAD (the pool verifies
  // that it is empty). If the pool has none when the direction needs one
  // again, it copies for 16 fills and then asks again (pipe_shortages);
  // only a direction that never got a pipe copies for good
  // (fell_back_no_pipe).
  //
  // Takes ownership of `fd_a` and `fd_b`: connected stream sockets (TCP or
  // UNIX), made non-blocking here, registered with `loop`. Fails (and
  // closes both) only if the loop refuses them, or for invalid fds.
  //
  // splice(2) into a socket cannot pass MSG_NOSIGNAL, so a peer that went
  // away would raise SIGPIPE: if SIGPIPE is at its default disposition
  // (terminate), Create sets it to SIG_IGN, process-wide. A handler the
  // program installed is left alone.
  static absl::StatusOr<std::unique_ptr<Relay>> Create(
      eventloop::EventLoop& loop, PipePool& pipes, int fd_a, int fd_b,
      const RelayOptions& options, DoneCallback done);

  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;
  // Unregisters, closes both fds, returns or closes the pipes.
  ~Relay();

  const RelayStats& stats() const;
  bool finished() const;

 private:
  class Core;  // relay.cc: the legs, the two directions, the pump
  explicit Relay(std::unique_ptr<Core> core);

  std::unique_ptr<Core> core_;
};

}  // namespace netstack::forward

#endif  // NETSTACK_FORWARD_RELAY_H_
