#include "tools/tcp_benchmark/netstack_net.h"

namespace netstack::tools::bench {

absl::StatusOr<std::unique_ptr<Net>> CreateNetstackNetFromFlags() {
  return absl::UnimplementedError("--stack=netstack is not built yet");
}

}  // namespace netstack::tools::bench
