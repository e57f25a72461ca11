// Proxy: splice_proxy's forwards on one event loop, its signals, its stats
// and its clean shutdown.
//
//   - SIGUSR1 prints the stats (per forward and in total) to stderr; they
//     are printed again at exit.
//   - The first SIGINT or SIGTERM stops listening (removing the socket
//     files the proxy created), drops the connections still connecting, and
//     lets relaying connections finish for up to `shutdown_grace`; then it
//     closes the rest. A second signal closes them at once.
//   - When no connection has been open for `pipe_idle_timeout`, the pooled
//     pipes are closed: each idle pipe keeps two fds open and counts its
//     full size against the user's fs.pipe-user-pages-soft, which every
//     process of the user shares (past it, new pipes are too small to
//     splice with, and relays copy).
#ifndef TOOLS_SPLICE_PROXY_PROXY_H_
#define TOOLS_SPLICE_PROXY_PROXY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/forward/relay.h"
#include "tools/splice_proxy/forwarder.h"

namespace netstack::tools {

// One --listen/--connect pair as given, and what came of parsing it.
struct ForwardSpec {
  std::string listen_text;
  std::string connect_text;
  absl::Status error;  // not OK: the forward cannot start (bad address)
  ForwarderOptions options;
};

struct ProxyConfig {
  std::vector<ForwardSpec> forwards;
  forward::PipePool::Options pipes;
  Duration shutdown_grace = absl::Seconds(2);
  Duration pipe_idle_timeout = absl::Seconds(10);  // infinite: never
  bool verbose = false;
};

class Proxy {
 public:
  static absl::StatusOr<std::unique_ptr<Proxy>> Create(ProxyConfig config);
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;
  ~Proxy();

  // Takes SIGINT, SIGTERM and SIGUSR1 over, then starts every forward
  // that parsed; logs each one's address or why it could not start.
  // Returns how many listen.
  absl::StatusOr<size_t> Start();
  // Serves until a signal stops it (see the top of this file), closes
  // everything, prints the exit stats. An error means the loop failed.
  absl::Status Run();

  // The stats block that SIGUSR1 prints, headed by `why`.
  std::string FormatStats(const std::string& why) const;

 private:
  explicit Proxy(ProxyConfig config,
                 std::unique_ptr<eventloop::EventLoop> loop);

  size_t OpenConnections() const;
  void OnSignal(int signo, Instant now);
  void OnTurnEnd(Instant now);
  void MaybeTrimPipes();
  void CloseEverything();
  void PrintStats(const std::string& why) const;

  const ProxyConfig config_;
  std::unique_ptr<eventloop::EventLoop> loop_;
  forward::PipePool pipes_;  // shared by every forward
  // One per spec; null when it did not start.
  std::vector<std::unique_ptr<Forwarder>> forwarders_;
  std::vector<std::string> start_errors_;  // per spec, empty when started
  size_t started_ = 0;
  bool stopping_ = false;
  bool idle_ = true;
  eventloop::Timer grace_timer_;
  eventloop::Timer trim_timer_;
};

}  // namespace netstack::tools

#endif  // TOOLS_SPLICE_PROXY_PROXY_H_
