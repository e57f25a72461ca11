#include "netstack/policy/policy_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace netstack::policy {

absl::StatusOr<std::shared_ptr<const PolicyFile>> PolicyFile::Open(
    const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0              ? "/"
                                                    : path.substr(0, slash);
  auto ref = std::make_shared<PolicyFile>();
  ref->name_ = slash == std::string::npos ? path : path.substr(slash + 1);
  ref->path_ = path;
  if (ref->name_.empty() || ref->name_ == "." || ref->name_ == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' does not name a file"));
  }
  ref->dir_.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!ref->dir_.valid()) {
    return link::ErrnoStatus(errno, absl::StrCat("open directory '", dir, "'"));
  }
  return std::shared_ptr<const PolicyFile>(std::move(ref));
}

absl::StatusOr<std::string> PolicyFile::Read() const {
  link::UniqueFd fd(
      ::openat(dir_.get(), name_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) return link::ErrnoStatus(errno, "open");
  std::string text;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return link::ErrnoStatus(errno, "read");
    }
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > kMaxBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("longer than ", kMaxBytes, " bytes"));
    }
  }
  return text;
}

absl::StatusOr<std::shared_ptr<const Policy>> LoadPolicyFile(
    const std::string& path) {
  absl::StatusOr<std::shared_ptr<const PolicyFile>> file =
      PolicyFile::Open(path);
  absl::StatusOr<std::string> text =
      file.ok() ? (*file)->Read() : absl::StatusOr<std::string>(file.status());
  if (!text.ok()) {
    return absl::Status(text.status().code(),
                        absl::StrCat(path, ": ", text.status().message()));
  }
  absl::StatusOr<PolicyConfig> config = ParsePolicyFile(*text);
  absl::StatusOr<std::shared_ptr<const Policy>> p =
      config.ok() ? Policy::Create(*std::move(config))
                  : absl::StatusOr<std::shared_ptr<const Policy>>(
                        config.status());
  if (!p.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", p.status().message()));
  }
  return p;
}

}  // namespace netstack::policy
