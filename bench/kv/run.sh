#!/bin/sh
# Runs the kvd vs etcd benchmark. Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/kv/run.sh [build-dir] [kvbench options]   (see bench/README.md)
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${KV_BUILD_DIR:-$src/build}
if [ $# -gt 0 ] && [ -d "$1" ]; then
    build=$(cd "$1" && pwd)
    shift
fi
bin=$build/bench/kv/kvbench
if [ ! -x "$bin" ]; then
    echo "run.sh: $bin not found; build the project first (cmake --build $build)" >&2
    exit 1
fi
export KV_BUILD_DIR="$build"
exec "$bin" "$@"
