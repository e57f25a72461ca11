// slirp4netns's API socket (-a/--api-socket PATH), served by netstackd as
// slirp4netns (slirp4netns_mode.h): Podman's port_handler=slirp4netns and
// rootlesskit's --port-driver=slirp4netns add and remove port forwards
// through it while the container runs.
//
// The wire is slirp4netns 1.2's: one JSON request per connection, one
// reply, then shutdown(SHUT_RDWR) and close. The requests and replies:
//
//   {"execute":"add_hostfwd","arguments":{"proto":"tcp","host_addr":
//    "0.0.0.0","host_port":8080,"guest_addr":"","guest_port":80}}
//       -> {"return":{"id":1}}
//   {"execute":"list_hostfwd"}
//       -> {"entries":[{"id":1,"proto":"tcp","host_addr":"0.0.0.0",
//           "host_port":8080,"guest_addr":"10.0.2.100","guest_port":80}]}
//   {"execute":"remove_hostfwd","arguments":{"id":1}}  -> {"return":{}}
//   anything wrong -> {"error":{"desc":"bad request: ..."}}
//
// host_addr "" (or none) is 0.0.0.0, as slirp4netns has it; guest_addr ""
// (or none) is the guest's address, the only one a forward reaches. ids
// are JSON numbers from 1. Extensions no existing client sees: an IPv6
// host_addr ("::" for every IPv6 address, "::1"), where slirp4netns takes
// IPv4 only; and a request without its "proto" gets the error reply where
// slirp4netns 1.2.0 crashes.
//
// slirp4netns reads a request with one read() of at most 4,096 bytes.
// Here a request is complete at the first of: a newline, the client's end
// of writing (EOF), or a buffer that parses as one JSON value; so one that
// arrives in pieces is read whole, and a client that sends no newline and
// keeps its end open (`nc -U` without -N) is answered too. 4,096 bytes or
// more get "too large message", as from slirp4netns. A client that sends
// nothing complete for kClientTimeout is answered "cannot parse JSON" and
// closed; at most kMaxClients at once (more are closed at accept). Nothing
// a client sends can stop the loop.
//
// The socket file is made with mode 0600 (whoever can connect opens ports
// on this host as netstackd). A socket file already at PATH (a previous
// run's, killed before it could remove it) is replaced, as slirp4netns
// does; any other file there is an error. The file is removed when this
// goes, by its directory (also after the sandbox has moved the root).
#ifndef TOOLS_NETSTACKD_SLIRP4NETNS_API_H_
#define TOOLS_NETSTACKD_SLIRP4NETNS_API_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "link/fd_util.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/port_forwards.h"
#include "netstack/wire/address.h"
#include "tools/tcp_benchmark/json.h"

namespace netstack::tools {

struct Slirp4netnsApiCounters {
  uint64_t connections = 0;
  uint64_t refused_connections = 0;  // past kMaxClients
  uint64_t requests = 0;
  uint64_t errors = 0;     // "error" replies
  uint64_t timeouts = 0;   // nothing complete within kClientTimeout
  uint64_t too_large = 0;  // kMaxRequest bytes or more
};

class Slirp4netnsApi : public eventloop::Handler {
 public:
  static constexpr size_t kMaxRequest = 4096;
  static constexpr size_t kMaxClients = 16;
  static constexpr absl::Duration kClientTimeout = absl::Seconds(5);

  // `guest4` is the guest's address: what guest_addr "" means and the
  // only one accepted.
  static absl::StatusOr<std::unique_ptr<Slirp4netnsApi>> Create(
      eventloop::EventLoop& loop, runtime::PortForwards& forwards,
      const std::string& path, wire::Ipv4Address guest4);
  Slirp4netnsApi(const Slirp4netnsApi&) = delete;
  Slirp4netnsApi& operator=(const Slirp4netnsApi&) = delete;
  ~Slirp4netnsApi() override;

  // One request to its reply. The socket's clients go through here; so
  // do the unit tests.
  std::string Handle(std::string_view request);
  // The reply to a request of kMaxRequest bytes or more.
  static std::string TooLarge();

  const Slirp4netnsApiCounters& counters() const { return counters_; }
  std::string FormatCounters() const;

  void OnReadable(Instant now) override;  // the listening socket

 private:
  class Client;
  struct Entry {
    uint64_t id = 0;
    bool udp = false;
    std::string host_addr;
    uint16_t host_port = 0;
    uint16_t guest_port = 0;
  };

  Slirp4netnsApi(eventloop::EventLoop& loop, runtime::PortForwards& forwards,
                 wire::Ipv4Address guest4, link::UniqueFd listener,
                 link::DirEntryRef socket_file);
  std::string Add(const bench::JsonValue& arguments);
  std::string List() const;
  std::string Remove(const bench::JsonValue& arguments);
  std::string Error(std::string_view desc);
  void Drop(Client* c);

  eventloop::EventLoop& loop_;
  runtime::PortForwards& forwards_;
  const wire::Ipv4Address guest4_;
  link::UniqueFd listener_;
  link::DirEntryRef socket_file_;
  std::vector<Entry> entries_;  // in the order added
  absl::flat_hash_map<Client*, std::unique_ptr<Client>> clients_;
  Slirp4netnsApiCounters counters_;
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SLIRP4NETNS_API_H_
