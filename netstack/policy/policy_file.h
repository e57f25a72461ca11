// A policy file (policy.h's ParsePolicyFile format) by its path: netstackd's
// --policy FILE, libnetstack's netstack_config.policy_file and
// NETSTACK_POLICY (docs/POLICY.md, docs/EMBEDDING.md).
#ifndef NETSTACK_POLICY_POLICY_FILE_H_
#define NETSTACK_POLICY_POLICY_FILE_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "link/fd_util.h"
#include "netstack/policy/policy.h"

namespace netstack::policy {

// A policy file held by its directory's fd, so that it can be read again
// (SIGHUP) after a sandbox has detached the filesystem (netstackd's seccomp
// filter lets openat open files read-only under that fd).
class PolicyFile {
 public:
  static absl::StatusOr<std::shared_ptr<const PolicyFile>> Open(
      const std::string& path);
  // The file's text now (at most kMaxBytes; an editor's rename is
  // followed, since the name is opened each time).
  static constexpr size_t kMaxBytes = 16 << 20;
  absl::StatusOr<std::string> Read() const;
  const std::string& path() const { return path_; }
  int dir_fd() const { return dir_.get(); }

 private:
  link::UniqueFd dir_;  // O_PATH
  std::string name_;
  std::string path_;
};

// The policy of the file at `path`, opened, read and parsed now. An error
// names the path, and the line when the text does not parse: "PATH: line
// 3: ...", "PATH: open: No such file or directory".
absl::StatusOr<std::shared_ptr<const Policy>> LoadPolicyFile(
    const std::string& path);

}  // namespace netstack::policy

#endif  // NETSTACK_POLICY_POLICY_FILE_H_
