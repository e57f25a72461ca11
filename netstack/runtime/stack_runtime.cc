#include "netstack/runtime/stack_runtime.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace netstack::runtime {

absl::StatusOr<uint64_t> RandomSeed() {
  uint64_t seed = 0;
  size_t got = 0;
  while (got < sizeof(seed)) {
    const ssize_t n = getrandom(reinterpret_cast<char*>(&seed) + got,
                                sizeof(seed) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(
          absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return seed;
}

}  // namespace netstack::runtime
