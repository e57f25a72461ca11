#!/usr/bin/env bash
# Instructions per UDP datagram of 1,400 bytes through netstackd's UDP flow
# table (bench/udp_callgrind.cc), guest to host and host to guest, from
# callgrind: two runs differing by 4,096 datagrams, so set-up cancels out.
# The flow table runs as the Backend runs it (coalesce). g2h-uso and
# h2g-uso need a tree with USO (issue #34); they print "n/a" otherwise.
# Usage: bench/callgrind_udp.sh   (builds with --config=opt first)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build --config=opt //bench:udp_callgrind >&2
bin=bazel-out/k8-optopt/bin/bench/udp_callgrind
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" \
    coalesce "$2" >"$tmp/stdout" 2>"$tmp/log" || return 1
  awk '/^summary:/ {print $2}' "$tmp/out"
}
for mode in g2h g2h-uso h2g h2g-gso h2g-uso; do
  if ! a=$(ir "$mode" 1024) || ! b=$(ir "$mode" 5120); then
    echo "$mode: n/a ($(tail -1 "$tmp/stdout"))"
    continue
  fi
  echo "$mode: $(( (b - a) / 4096 )) instructions per datagram" \
       "(Ir $a for 1024 datagrams, $b for 5120)"
done
