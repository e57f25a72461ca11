// Command-line conventions shared by the tools.
#ifndef TOOLS_COMMON_CLI_H_
#define TOOLS_COMMON_CLI_H_

#include <string>
#include <string_view>
#include <vector>

namespace netstack::tools {

// absl flags are named with underscores; accept the dashed spelling too
// (--http-root for --http_root). Only flag names change, never values,
// and nothing after a bare "--".
void DashesToUnderscores(int argc, char** argv);

// --help lists only the flags defined in files under `dir` (e.g.
// "tools/netstackd/"): absl's default looks for a file named after the
// binary.
void HelpListsFlagsUnder(std::string dir);

// Parses the command line by the tools' one rule for exit codes:
//   - --help, --helpfull, --helpshort, --helppackage, --version print to
//     stdout and exit 0;
//   - an unknown flag, a flag without its value, or a value its flag does
//     not parse prints one line naming it (for a duration without a unit,
//     with a hint) and exits 2, like every other usage error of the tools;
//   - 1 is left for runtime failures, the tool's own.
// Abseil 20220623's ParseCommandLine exits 1 for all of these; the check
// runs the flags' own parsers first. Returns the positional arguments,
// argv[0] first, as absl::ParseCommandLine does. `tool` prefixes messages.
std::vector<char*> ParseCommandLineOrExit(std::string_view tool, int argc,
                                          char** argv);

}  // namespace netstack::tools

#endif  // TOOLS_COMMON_CLI_H_
