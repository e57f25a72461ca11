// netstackd as slirp4netns: started under the name "slirp4netns" (a
// symlink) or as `netstackd slirp4netns ...`, netstackd takes slirp4netns
// 1.2's command line and API socket (docs/SLIRP4NETNS.md), so that Podman
// and rootlesskit start it unmodified.
#ifndef TOOLS_NETSTACKD_SLIRP4NETNS_MODE_H_
#define TOOLS_NETSTACKD_SLIRP4NETNS_MODE_H_

namespace netstack::tools {

// Whether this invocation asks for slirp4netns's command line: argv[0]'s
// base name is "slirp4netns", or argv[1] is "slirp4netns".
bool InvokedAsSlirp4netns(int argc, char** argv);

// Runs netstackd with slirp4netns's command line; returns the exit
// status (slirp4netns's: 0 after a clean stop, 1 for bad usage or a
// failure to start).
int RunAsSlirp4netns(int argc, char** argv);

}  // namespace netstack::tools

#endif  // TOOLS_NETSTACKD_SLIRP4NETNS_MODE_H_
