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

// A --help organised for a person: the usage lines, what the tool does,
// its flags in groups by task, and the exit status. Abseil's own dump
// (every flag alphabetically, by file) stays behind --helpfull.
struct HelpGroup {
  std::string title;  // "Forwards"
  // When you need these flags, shown after "Title: ", so it starts in
  // lower case: "when the host must reach a server in the guest."
  std::string when;
  // One entry per flag, as it is shown: "--http-root DIR", "--backend",
  // "-t, --tcp-forward SPEC". The name after "--" is the flag's, with '-'
  // for '_'; the rest is free text (the value's name).
  std::vector<std::string> flags;
};

struct HelpPage {
  std::string tool;           // "netstackd"
  std::string usage;          // the "usage:" lines, printed as they are
  std::string description;    // paragraphs split by "\n\n", wrapped
  std::vector<HelpGroup> groups;
  std::string exit_status;    // printed as it is, after the groups
  // Every flag defined in a file whose path contains this (e.g.
  // "tools/netstackd/") belongs in a group. One that is in none is shown
  // in a last group, "Other flags", so that it cannot vanish from --help,
  // and is a problem FormatHelp reports (a test fails on it).
  std::string flags_dir;
  // Flag names as the tool's parser takes them: with dashes (the tool
  // calls DashesToUnderscores) or with underscores.
  bool dashed_names = true;
};

// The page as --help prints it, wrapped to 80 columns. Each flag is shown
// as its entry, then "(default: X)" when it has one (not "", false, 0 or
// -1), then its help text indented below it. Help text that starts with
// the entry and ": " (as "-t, --tcp-forward SPEC: ...") loses that prefix.
// Problems (a flag of flags_dir in no group, an entry in two groups, an
// entry that names no flag) go to *problems when it is not null.
std::string FormatHelp(const HelpPage& page,
                       std::vector<std::string>* problems = nullptr);

// From now on --help and --helpshort (without a value) print
// FormatHelp(page); --helpfull and --help=SUBSTRING stay Abseil's, whose
// usage message becomes the page's usage and description. Call once,
// before ParseCommandLineOrExit, instead of absl::SetProgramUsageMessage
// and HelpListsFlagsUnder.
void SetHelpPage(HelpPage page);

// Wraps `text` to lines of at most `width` columns (a longer word stands
// alone), each line starting with `indent` spaces; the result ends with
// "\n". Words are split at spaces only.
std::string WrapText(std::string_view text, int indent, int width = 80);

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
