#include "tools/tcp_benchmark/driver.h"

#include <cstdio>

namespace netstack::tools::bench {

int RunDriver(const char* self) {
  std::fprintf(stderr, "tcp_benchmark: driver mode is not built yet\n");
  return 2;
}

}  // namespace netstack::tools::bench
