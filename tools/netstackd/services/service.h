// What every netstackd service shares: the layers it runs on, the turn's
// time, and the rule for freeing connections.
//
// Services are driven by readiness callbacks (transport::Notifier) and by
// timers on the event loop's wheel. A callback must not destroy the socket
// whose callback is running (the callable lives inside it), so a finished
// connection is handed to a Graveyard and freed by Sweep() after the
// notifier's Dispatch, at the end of the turn.
#ifndef TOOLS_NETSTACKD_SERVICES_SERVICE_H_
#define TOOLS_NETSTACKD_SERVICES_SERVICE_H_

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/timer_wheel.h"
#include "netstack/tcp/tcp_layer.h"
#include "netstack/udp/udp_layer.h"

namespace netstack::tools {

struct ServiceContext {
  tcp::TcpLayer* tcp = nullptr;
  udp::UdpLayer* udp = nullptr;
  eventloop::TimerWheel* timers = nullptr;
  // The current turn's time; the embedder sets it before Dispatch.
  Instant now = absl::InfinitePast();
};

class Service {
 public:
  virtual ~Service() = default;
  // Frees the connections retired during this turn.
  virtual void Sweep() = 0;
  // "service.<name>.<counter> value" lines.
  virtual std::string FormatCounters() const = 0;
  // One "service.<name>.connection <peer> <TcpInfo>" line per open TCP
  // connection: what SIGUSR1 shows to diagnose a stalled transfer.
  virtual std::string FormatConnections() const = 0;
};

// Owns live connections of type T and frees retired ones on Sweep().
template <typename T>
class ConnectionSet {
 public:
  T* Add(std::unique_ptr<T> c) {
    T* raw = c.get();
    live_.emplace(raw, std::move(c));
    return raw;
  }
  // Safe from inside `c`'s own callbacks; `c` stays valid until Sweep().
  void Retire(T* c) {
    auto it = live_.find(c);
    if (it == live_.end()) return;
    dead_.push_back(std::move(it->second));
    live_.erase(it);
  }
  void Sweep() { dead_.clear(); }
  size_t size() const { return live_.size(); }
  template <typename F>
  void ForEach(F f) const {
    for (const auto& [raw, c] : live_) f(*c);
  }

 private:
  absl::flat_hash_map<T*, std::unique_ptr<T>> live_;
  std::vector<std::unique_ptr<T>> dead_;
};

// "<prefix> <peer> <TcpInfo>\n" for a connection's socket.
inline std::string DescribeConnection(std::string_view prefix,
                                      const tcp::TcpSocket& s) {
  return absl::StrCat(std::string(prefix), " ", s.remote_address().ToString(),
                      " ", s.Info().ToString(), "\n");
}

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SERVICES_SERVICE_H_
