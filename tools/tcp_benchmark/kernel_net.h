// bench::Net over the host kernel's TCP sockets: non-blocking fds on one
// level-triggered EventLoop. The bulk calls (SendBulk/DiscardBulk) use the
// copy-avoidance mode chosen in KernelNetOptions, so the benchmark can
// compare what copying to and from user memory costs:
//
//   receive plain    recv() into one reused buffer
//   receive splice   splice(socket -> pipe), splice(pipe -> /dev/null)
//   send plain       send() from one reused buffer
//   send vmsplice    vmsplice(buffer -> pipe), splice(pipe -> socket)
//   send sendfile    sendfile(memfd -> socket), the memfd filled once
#ifndef TOOLS_TCP_BENCHMARK_KERNEL_NET_H_
#define TOOLS_TCP_BENCHMARK_KERNEL_NET_H_

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "tools/tcp_benchmark/bench_net.h"

namespace netstack::tools::bench {

enum class RecvMode { kPlain, kSplice };
enum class SendMode { kPlain, kVmsplice, kSendfile };

// "plain"/"splice"; "plain"/"vmsplice"/"sendfile". InvalidArgument
// otherwise.
absl::StatusOr<RecvMode> ParseRecvMode(std::string_view name);
absl::StatusOr<SendMode> ParseSendMode(std::string_view name);
std::string RecvModeName(RecvMode mode);
std::string SendModeName(SendMode mode);

struct KernelNetOptions {
  RecvMode recv_mode = RecvMode::kPlain;
  SendMode send_mode = SendMode::kPlain;
  // Size of the reused buffers, of each stream's pipe (rounded by the
  // kernel to pages; capped by /proc/sys/fs/pipe-max-size for non-root)
  // and of the sendfile memfd.
  size_t buffer_size = 256 * 1024;
};

// Creates its own EventLoop. Pipes are made per stream on first use, the
// memfd and /dev/null once, lazily.
absl::StatusOr<std::unique_ptr<Net>> CreateKernelNet(
    const KernelNetOptions& options);

}  // namespace netstack::tools::bench

#endif  // TOOLS_TCP_BENCHMARK_KERNEL_NET_H_
