// A UNIX stream socket that serves one request line for one answer line,
// the framing both --forward-api (forward_api.h) and --control
// (control_api.h) speak. It owns the listening socket and its clients;
// what a line means is the owner's (`handle`).
//
// The socket is made with mode 0600 (whoever can connect acts as
// netstackd), refuses to replace an existing file, and is unlinked when
// this goes (by its directory, so also after the root has moved). Per
// client:
//   - request lines end with "\n" ("\r\n" too); empty lines are skipped;
//   - a request line longer than `max_line` bytes draws `too_long()` as
//     its answer, and the client is closed;
//   - at most `max_lines_per_wakeup` of a client's lines are handled per
//     loop turn; the rest wait, already read, and are handled on the next
//     turns (nothing more is read from the client meanwhile), so one
//     client's pipelined requests cannot hold the loop or the other
//     clients;
//   - a client's lines are handled only while fewer than `max_output`
//     bytes of answers wait for it (the answers are held to that plus one
//     answer); a client that does not read them is closed once
//     `max_output` bytes wait (counted: closed_slow_clients);
//   - at most `max_clients` at once; more are closed at accept
//     (counted); so is a client the peer check refuses (SetPeerCheck);
//   - a client that closes its end still gets the answers due, then is
//     closed.
// Reads and accepts are bounded per wake-up, like every handler on the
// loop. Nothing a client sends can stop the loop, or make it hold more
// than about max_line + max_output + 16 KiB per client.
#ifndef TOOLS_NETSTACKD_JSON_LINES_SERVER_H_
#define TOOLS_NETSTACKD_JSON_LINES_SERVER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "link/fd_util.h"
#include "netstack/base/time.h"
#include "netstack/eventloop/event_loop.h"

namespace netstack::tools {

class JsonLinesServer : public eventloop::Handler {
 public:
  struct Options {
    // The flag that named the path ("--control"), for error messages.
    std::string flag;
    size_t max_line = 64 * 1024;
    size_t max_output = 4 * 1024 * 1024;
    size_t max_clients = 16;  // also the listen backlog
    // Per client and loop turn; a "counters" answer takes some 100 us to
    // build, so 16 of them keep a turn short.
    size_t max_lines_per_wakeup = 16;
    // One request line (without its newline) to its answer (without one).
    std::function<std::string(std::string_view line, Instant now)> handle;
    // The answer to a line past max_line, before the client is closed.
    std::function<std::string()> too_long;
  };

  static absl::StatusOr<std::unique_ptr<JsonLinesServer>> Create(
      eventloop::EventLoop& loop, const std::string& path, Options options);
  JsonLinesServer(const JsonLinesServer&) = delete;
  JsonLinesServer& operator=(const JsonLinesServer&) = delete;
  ~JsonLinesServer() override;

  // Decides at accept whether a client may talk: OK admits it; an error
  // closes it at once, counted (refused_peers), the first one logged with
  // the error's message. Unset: every client is admitted.
  using PeerCheck = std::function<absl::Status(int fd)>;
  void SetPeerCheck(PeerCheck check) { peer_check_ = std::move(check); }

  uint64_t connections() const { return connections_; }
  uint64_t refused_connections() const { return refused_connections_; }
  uint64_t refused_peers() const { return refused_peers_; }
  // Clients closed because max_output bytes of answers waited.
  uint64_t closed_slow_clients() const { return closed_slow_clients_; }
  size_t clients() const { return clients_.size(); }
  // The most answer bytes that ever waited for one client (tests, and a
  // check on the bound above).
  size_t output_high_water() const { return output_high_water_; }

  void OnReadable(Instant now) override;  // accept

 private:
  class Client;
  JsonLinesServer(eventloop::EventLoop& loop, Options options,
                  std::string path, link::UniqueFd fd,
                  link::DirEntryRef socket_file);
  void Drop(Client* c);

  eventloop::EventLoop& loop_;
  Options options_;
  std::string path_;
  link::UniqueFd fd_;
  link::DirEntryRef socket_file_;  // path_, by its directory
  uint64_t connections_ = 0;
  uint64_t refused_connections_ = 0;
  PeerCheck peer_check_;
  uint64_t refused_peers_ = 0;
  uint64_t closed_slow_clients_ = 0;
  size_t output_high_water_ = 0;
  absl::flat_hash_map<Client*, std::unique_ptr<Client>> clients_;
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_JSON_LINES_SERVER_H_
