#!/usr/bin/env bash
# Instructions per MiB sent over TCP between two in-process stacks, with
# software GSO on the sender's link and without, from callgrind: two runs
# differing by 32 MiB, so set-up and slow start cancel out.
# Usage: bench/callgrind_tx.sh   (builds with --config=opt first)
set -euo pipefail
cd "$(dirname "$0")/.."
bazel build --config=opt //bench:tcp_tx_callgrind >&2
bin=bazel-out/k8-optopt/bin/bench/tcp_tx_callgrind
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() {
  valgrind --tool=callgrind --callgrind-out-file="$tmp/out" "$bin" "$1" "$2" \
    >/dev/null 2>"$tmp/log"
  awk '/^summary:/ {print $2}' "$tmp/out"
}
for mode in off sw; do
  a=$(ir "$mode" 16)
  b=$(ir "$mode" 48)
  echo "GSO $mode: $(( (b - a) / 32 )) instructions per MiB" \
       "(Ir $a for 16 MiB, $b for 48 MiB)"
done
