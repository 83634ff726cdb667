#!/bin/sh
# Watch benchmarks, kvd vs etcd, same machine, same run (figures in docs/ARCHITECTURE.md).
#   bench/watch/run.sh [build-dir]
# WB_SERVER=kvd|etcd restricts to one server.
set -e
B=${1:-build}
export KV_BUILD_DIR=$(cd "$B" && pwd)
"$KV_BUILD_DIR/bench/watch/watchbench" idle 100000 10 8 5
"$KV_BUILD_DIR/bench/watch/watchbench" live 1000 10 100 10
"$KV_BUILD_DIR/bench/watch/watchbench" catchup 1000 10 100000
"$KV_BUILD_DIR/bench/watch/watchbench" stalled 1000000
