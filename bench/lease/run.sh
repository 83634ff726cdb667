#!/bin/sh
# Runs the lease keepalive benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/lease/run.sh [build-dir] [leasebench options]
#   short run (default): 2,000 leases, 15 s
#   full run (issue 4):  bench/lease/run.sh build --leases 20000 --duration 60
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${KV_BUILD_DIR:-$src/build}
if [ $# -gt 0 ] && [ -d "$1" ]; then
    build=$(cd "$1" && pwd)
    shift
fi
bin=$build/bench/lease/leasebench
if [ ! -x "$bin" ]; then
    echo "run.sh: $bin not found; build the project first (cmake --build $build)" >&2
    exit 1
fi
export KV_BUILD_DIR="$build"
exec "$bin" "$@"
