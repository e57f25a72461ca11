#include "link/netns.h"

#include <fcntl.h>
#include <sched.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "link/fd_util.h"

namespace netstack::link {
namespace {

absl::Status ValidateNetnsName(const std::string& name) {
  if (name == "." || name == ".." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("netns name '", name, "' is not a plain name"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueFd> OpenNetnsFd(const std::string& name) {
  if (absl::Status s = ValidateNetnsName(name); !s.ok()) return s;
  const std::string path = absl::StrCat(kNetnsDir, "/", name);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(
          absl::StrCat("netns '", name, "' does not exist (no ", path, ")"));
    }
    return ErrnoStatus(err, absl::StrCat("netns '", name, "': open ", path));
  }
  return fd;
}

absl::Status SetnsError(int err, const std::string& name) {
  if (err == EPERM) {
    return absl::PermissionDeniedError(
        absl::StrCat("entering netns '", name,
                     "' needs CAP_SYS_ADMIN: ", std::strerror(err)));
  }
  if (err == EINVAL) {
    return absl::InvalidArgumentError(
        absl::StrCat("netns '", name, "': ", kNetnsDir, "/", name,
                     " is not a network namespace"));
  }
  return ErrnoStatus(err, absl::StrCat("setns into netns '", name, "'"));
}

}  // namespace

absl::Status RunInNetns(const std::string& netns_name,
                        absl::FunctionRef<absl::Status()> fn) {
  if (netns_name.empty()) return fn();

  absl::StatusOr<UniqueFd> target = OpenNetnsFd(netns_name);
  if (!target.ok()) return target.status();

  UniqueFd original(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (!original.valid()) {
    return ErrnoStatus(errno, "open /proc/thread-self/ns/net");
  }
  if (::setns(target->get(), CLONE_NEWNET) != 0) {
    return SetnsError(errno, netns_name);
  }

  absl::Status result = fn();

  if (::setns(original.get(), CLONE_NEWNET) != 0) {
    const int err = errno;
    std::fprintf(stderr,
                 "netstack: cannot switch this thread back from netns '%s' "
                 "to its original network namespace: %s\n",
                 netns_name.c_str(), std::strerror(err));
    std::abort();
  }
  return result;
}

absl::StatusOr<int> OpenInNetns(
    const std::string& netns_name,
    absl::FunctionRef<absl::StatusOr<int>()> open_fn) {
  int fd = -1;
  absl::Status s = RunInNetns(netns_name, [&]() -> absl::Status {
    absl::StatusOr<int> opened = open_fn();
    if (!opened.ok()) return opened.status();
    fd = *opened;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return fd;
}

absl::Status RunInNetnsFd(int netns_fd,
                          absl::FunctionRef<absl::Status()> fn) {
  absl::Status result;
  std::thread worker([&] {
    if (::setns(netns_fd, CLONE_NEWNET) != 0) {
      const int err = errno;
      if (err == EPERM) {
        result = absl::PermissionDeniedError(absl::StrCat(
            "entering the guest's network namespace needs CAP_SYS_ADMIN "
            "over its user namespace: ",
            std::strerror(err)));
      } else if (err == EINVAL) {
        result = absl::InvalidArgumentError(
            "that file is not a network namespace");
      } else {
        result = ErrnoStatus(err, "setns into the guest's network namespace");
      }
      return;
    }
    result = fn();
  });
  worker.join();
  return result;
}

}  // namespace netstack::link
