// Forwarder: one --listen/--connect pair of splice_proxy. It listens,
// accepts, connects to the target without blocking, and hands each pair
// of connected sockets to a forward::Relay.
//
// Life of a connection:
//   accept4 (in a loop until EAGAIN, on the event loop)
//     -> socket + non-blocking connect to the target
//        (EINPROGRESS: wait for writability, then read SO_ERROR;
//         a UNIX target with a full backlog answers EAGAIN: retry with
//         backoff) until --connect_timeout
//     -> Relay::Create(client, target) -> relaying -> done callback
//     -> destroyed by Reap() at the end of the loop turn.
// A connection whose target cannot be reached is closed (a TCP client gets
// a reset, so that it cannot mistake the failure for an empty answer) and
// the reason is logged; the forward keeps serving.
//
// Running out of fds (EMFILE/ENFILE) or memory in accept() pauses
// accepting for a moment instead of spinning on the level-triggered
// listener; accepting resumes when a connection closes or after
// kAcceptPause.
#ifndef TOOLS_SPLICE_PROXY_FORWARDER_H_
#define TOOLS_SPLICE_PROXY_FORWARDER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/forward/relay.h"
#include "tools/splice_proxy/forward_counters.h"
#include "tools/splice_proxy/socket_address.h"

namespace netstack::tools {

struct ForwarderOptions {
  SocketAddress listen;
  SocketAddress target;
  forward::RelayOptions relay;
  Duration connect_timeout = absl::Seconds(10);
  int backlog = 4096;
  bool verbose = false;  // log every connection, not only failures
};

class Forwarder final : public eventloop::Handler {
 public:
  // How long accepting pauses after EMFILE/ENFILE/ENOBUFS/ENOMEM if no
  // connection closes in the meantime.
  static constexpr Duration kAcceptPause = absl::Milliseconds(100);

  // `index` names the forward in logs ("forward 0"). `loop` and `pipes`
  // must outlive the Forwarder.
  Forwarder(int index, ForwarderOptions options, eventloop::EventLoop& loop,
            forward::PipePool& pipes);
  Forwarder(const Forwarder&) = delete;
  Forwarder& operator=(const Forwarder&) = delete;
  // StopListening() and CloseAll().
  ~Forwarder() override;

  // Creates, binds and registers the listening socket. A stale socket file
  // of a dead process (connecting to it is refused) is replaced; any other
  // existing file is left alone. On error nothing is left behind and the
  // message says what and why.
  absl::Status Listen();
  // Closes the listener and removes the socket file it created (if it is
  // still the one it created), and abandons the connections that are still
  // connecting. Relaying connections go on.
  void StopListening();
  // Closes every connection now (counted as aborted).
  void CloseAll();
  // Destroys the connections that finished during this turn. Call it from
  // an end-of-turn hook: never from inside a handler of this forward.
  void Reap();

  bool listening() const { return listen_fd_ >= 0; }
  // Connections that are connecting or relaying.
  size_t open_connections() const {
    return connections_.size() - finished_.size();
  }
  // Where it listens (with the port the kernel chose for port 0).
  const SocketAddress& bound() const { return bound_; }
  const ForwarderOptions& options() const { return options_; }
  // Finished connections plus the live relays' current stats.
  ForwardCounters counters() const;

  // Accepts until EAGAIN.
  void OnReadable(Instant now) override;
  void OnError(Instant now, uint32_t epoll_events) override;

 private:
  class Connection;

  enum class Outcome { kCompleted, kRelayError, kConnectFailed, kAborted };

  void Log(const std::string& message) const;
  absl::Status BindUnix(int fd);
  // Closes and unregisters the listener, removes its socket file.
  void CloseListener();
  void PauseAccepting(Instant now, int err);
  void ResumeAccepting();
  // Called by a Connection when it is over; it is destroyed by Reap().
  void Finished(Connection& connection, Outcome outcome,
                const forward::RelayStats* stats);

  const ForwarderOptions options_;
  eventloop::EventLoop& loop_;
  forward::PipePool& pipes_;
  const std::string name_;  // "forward 0"

  int listen_fd_ = -1;
  SocketAddress bound_;
  // The socket file Listen() created: removed by StopListening() only if
  // the path still names this inode.
  bool created_file_ = false;
  dev_t file_dev_ = 0;
  ino_t file_ino_ = 0;

  bool accept_paused_ = false;
  eventloop::Timer resume_timer_;
  Instant last_pause_log_ = absl::InfinitePast();
  uint64_t pauses_since_log_ = 0;

  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, std::unique_ptr<Connection>> connections_;
  std::vector<uint64_t> finished_;  // ids to Reap
  // Accept counters, and the finished connections' outcomes and bytes.
  ForwardCounters totals_;
};

}  // namespace netstack::tools

#endif  // TOOLS_SPLICE_PROXY_FORWARDER_H_
