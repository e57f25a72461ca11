// Every command-line flag of tcp_benchmark, declared in one place: the
// role code (main.cc), the netstack setup (netstack_net.cc) and the driver
// (driver.cc) read them, and the driver passes them on to the roles it
// starts. See --help for what each one means.
#ifndef TOOLS_TCP_BENCHMARK_FLAGS_H_
#define TOOLS_TCP_BENCHMARK_FLAGS_H_

#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/time/time.h"

// Role selection (no --role: driver mode).
ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(std::string, stack);
ABSL_DECLARE_FLAG(std::string, connect);
ABSL_DECLARE_FLAG(int, port);
ABSL_DECLARE_FLAG(bool, one_off);
ABSL_DECLARE_FLAG(bool, reverse);
ABSL_DECLARE_FLAG(bool, rr);
ABSL_DECLARE_FLAG(bool, crr);
ABSL_DECLARE_FLAG(bool, udp_rr);

// Measurement.
ABSL_DECLARE_FLAG(double, duration);
ABSL_DECLARE_FLAG(double, interval);
ABSL_DECLARE_FLAG(int, streams);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(bool, verbose);
ABSL_DECLARE_FLAG(bool, exit_counters);
ABSL_DECLARE_FLAG(std::string, cc);
ABSL_DECLARE_FLAG(bool, sack);
ABSL_DECLARE_FLAG(std::string, recv_mode);
ABSL_DECLARE_FLAG(std::string, send_mode);

// The netstack link (as netstackd).
ABSL_DECLARE_FLAG(std::string, tap);
ABSL_DECLARE_FLAG(std::string, packet);
ABSL_DECLARE_FLAG(std::string, netns);
ABSL_DECLARE_FLAG(std::vector<std::string>, addr);
ABSL_DECLARE_FLAG(std::vector<std::string>, addr6);
ABSL_DECLARE_FLAG(int, mtu);
ABSL_DECLARE_FLAG(int, gso);
ABSL_DECLARE_FLAG(bool, swgso);
ABSL_DECLARE_FLAG(bool, hostgso);
ABSL_DECLARE_FLAG(std::string, pcap);

// Impairments (netstack's fault injector, both directions).
ABSL_DECLARE_FLAG(double, loss);
ABSL_DECLARE_FLAG(double, duplicate);
ABSL_DECLARE_FLAG(double, reorder);
ABSL_DECLARE_FLAG(absl::Duration, latency);
ABSL_DECLARE_FLAG(uint64_t, seed);

// Driver mode.
ABSL_DECLARE_FLAG(bool, client);
ABSL_DECLARE_FLAG(bool, server);
ABSL_DECLARE_FLAG(bool, ideal);
ABSL_DECLARE_FLAG(std::string, link);
ABSL_DECLARE_FLAG(std::string, modes);
ABSL_DECLARE_FLAG(std::string, mtus);
ABSL_DECLARE_FLAG(bool, kernel_baseline);
ABSL_DECLARE_FLAG(bool, keep_topology);

#endif  // TOOLS_TCP_BENCHMARK_FLAGS_H_
