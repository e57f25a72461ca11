// Driver mode (tcp_benchmark without --role): builds namespaces and a
// link, starts the roles as child processes of `self` (this binary),
// measures netstack against the kernel, prints interval lines, a table
// and optionally JSON, and tears the topology down even after an error
// or Ctrl-C.
#ifndef TOOLS_TCP_BENCHMARK_DRIVER_H_
#define TOOLS_TCP_BENCHMARK_DRIVER_H_

namespace netstack::tools::bench {

// Returns the process exit status.
int RunDriver(const char* self);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_DRIVER_H_
