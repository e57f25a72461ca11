// splice_proxy's log: one line per event on stderr, prefixed with the
// program name, flushed at once (the tests and supervisors read it live).
#ifndef TOOLS_SPLICE_PROXY_LOG_H_
#define TOOLS_SPLICE_PROXY_LOG_H_

#include <cstdio>
#include <string>

namespace netstack::tools {

inline void LogLine(const std::string& message) {
  std::fprintf(stderr, "splice_proxy: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace netstack::tools

#endif  // TOOLS_SPLICE_PROXY_LOG_H_
