// Command-line conventions shared by the tools.
#ifndef TOOLS_COMMON_CLI_H_
#define TOOLS_COMMON_CLI_H_

#include <string>

namespace netstack::tools {

// absl flags are named with underscores; accept the dashed spelling too
// (--http-root for --http_root). Only flag names change, never values,
// and nothing after a bare "--".
void DashesToUnderscores(int argc, char** argv);

// --help lists only the flags defined in files under `dir` (e.g.
// "tools/netstackd/"): absl's default looks for a file named after the
// binary.
void HelpListsFlagsUnder(std::string dir);

}  // namespace netstack::tools

#endif  // TOOLS_COMMON_CLI_H_
