// --forward-api PATH: a UNIX stream socket through which a running
// netstackd's port forwards are added, listed and removed, and its
// counters read. One JSON object per line each way (docs/SANDBOX.md):
//
//   {"op":"add","proto":"tcp","spec":"8080:80"}  -> {"ok":true,"id":3}
//   {"op":"remove","id":3}                       -> {"ok":true}
//   {"op":"list"}  -> {"ok":true,"forwards":[{"id":1,"proto":"tcp",
//                     "spec":"8080:80","path":"splice","listeners":2,
//                     "counters":{"accepted":4,...}}, ...]}
//   {"op":"counters"} -> {"ok":true,"counters":{"backend.tcp_flows_open":0,
//                     ...}}  (the lines SIGUSR1 prints, as numbers where
//                     they are numbers)
//   {"op":"policy"} -> {"ok":true,"policy":{"mode":"allowlist",
//                     "rules":["allow example.com","deny 10.0.0.0/8"]}}
//                     (mode: open, allowlist or none; every rule in force)
//   {"op":"policy","replace":["allow example.com","deny 10.0.0.0/8"]}
//   {"op":"policy","file":"allow example.com\n# ...\n"}
//                   -> {"ok":true,"reset":2,"policy":{...}}: the new rules
//                     (each item a policy file's line, or a file's text)
//                     replace --policy FILE's, beside --allow and --deny,
//                     as SIGHUP does; "reset" counts the open flows it
//                     denies, which are reset. A rule that does not parse
//                     changes nothing: {"ok":false,"error":"line 2: ..."}.
//   anything wrong  -> {"ok":false,"error":"..."}; the connection stays.
//
// Specs take the -t/-u shape, ranges, both families and unix: included
// (slirp4netns's API is IPv4 only, gvisor-tap-vsock's has no ranges).
// Removing a forward closes its listeners; its connections run to their
// end.
//
// The socket and its clients are a JsonLinesServer (json_lines_server.h:
// mode 0600, since whoever can connect can open ports on this host as
// netstackd; never replaces an existing file; unlinked when this goes).
//
// With -- CMD, mode 0600 does not keep CMD out: CMD runs as netstackd's
// user and sees the host's files. RefuseClientsBelow fences CMD's PID
// namespace (pid_namespace_fence.h): a client inside it, or nested below
// it, is closed at accept, counted (refused_peers) and logged once; so is
// a client whose namespace cannot be told (another user's, or not
// dumpable). With --netns-pid the guest is a process tree netstackd did
// not make: it is fenced the same way when its PID namespace is below
// netstackd's; when it shares netstackd's namespace (`unshare -n` alone)
// nothing tells its processes from the operator's, and the API trusts
// whoever can open the socket: keep its path out of the guest's reach.
//
// A
// client's request line is at most kMaxLine bytes (longer: an error, then
// the connection is closed); a client that does not read its answers is
// closed once kMaxOutput bytes wait for it; at most kMaxClients
// connections at once (more are closed at accept); at most
// kMaxLinesPerWakeup of a client's requests are handled per loop turn.
// Nothing a client sends can stop the loop.
#ifndef TOOLS_NETSTACKD_FORWARD_API_H_
#define TOOLS_NETSTACKD_FORWARD_API_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "netstack/eventloop/event_loop.h"
#include "netstack/runtime/port_forwards.h"
#include "tools/netstackd/json_lines_server.h"
#include "netstack/sandbox/pid_namespace_fence.h"

namespace netstack::tools {

struct ForwardApiCounters {
  uint64_t connections = 0;
  uint64_t refused_connections = 0;  // past kMaxClients
  uint64_t closed_slow_clients = 0;  // kMaxOutput bytes of answers waited
  uint64_t refused_peers = 0;        // inside the fenced PID namespace
  uint64_t requests = 0;
  uint64_t errors = 0;  // answers with "ok":false
};

// The egress policy as the "policy" op shows it.
struct PolicySummary {
  std::string mode;                // "open", "allowlist" or "none"
  std::vector<std::string> rules;  // each rule's text, "allow RULE"
};

// What the "policy" op reads and changes (the daemon's, which also does
// SIGHUP's). Unset: the op answers that there is no egress policy here.
struct PolicyHooks {
  std::function<PolicySummary()> get;
  // A policy file's text in place of --policy FILE's; an error (a line
  // that does not parse) changes nothing. Returns the flows reset.
  std::function<absl::StatusOr<uint64_t>(std::string_view text)> replace;
};

class ForwardApi {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;
  static constexpr size_t kMaxOutput = 4 * 1024 * 1024;
  static constexpr size_t kMaxClients = 16;
  static constexpr size_t kMaxLinesPerWakeup = 16;

  // `counters` returns the "name value" lines SIGUSR1 prints.
  static absl::StatusOr<std::unique_ptr<ForwardApi>> Create(
      eventloop::EventLoop& loop, runtime::PortForwards& forwards,
      std::function<std::string()> counters, const std::string& path);
  ForwardApi(const ForwardApi&) = delete;
  ForwardApi& operator=(const ForwardApi&) = delete;
  ~ForwardApi();

  // From now on, refuses every client that runs inside the PID namespace
  // of process `pid` or one below it: CMD's, given its init (`owner`
  // names it in the log: "CMD's"). Errors as PidNamespaceFence::Below;
  // FailedPrecondition when `pid` shares netstackd's namespace.
  absl::Status RefuseClientsBelow(pid_t pid, std::string owner);
  // The fence's /proc directory fd, which the seccomp filter must let
  // openat use (PidNamespaceFence's kProc way); -1 if none.
  int proc_dir_fd() const { return fence_ ? fence_->proc_dir_fd() : -1; }

  // The "policy" op's (see above).
  void SetPolicyHooks(PolicyHooks hooks) { policy_ = std::move(hooks); }

  // One request line (without its newline) to its answer (without one).
  // The socket's clients go through here; so do the unit tests.
  std::string Handle(std::string_view line);

  ForwardApiCounters counters() const;
  std::string FormatCounters() const;

 private:
  ForwardApi(runtime::PortForwards& forwards,
             std::function<std::string()> counters);

  runtime::PortForwards& forwards_;
  std::function<std::string()> counter_text_;
  PolicyHooks policy_;
  ForwardApiCounters counters_;  // requests and errors; the server counts
                                 // connections
  std::unique_ptr<sandbox::PidNamespaceFence> fence_;  // before server_: it checks
  std::unique_ptr<JsonLinesServer> server_;
};

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_FORWARD_API_H_
