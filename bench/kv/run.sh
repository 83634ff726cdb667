#!/bin/sh
# Runs the kvd vs etcd benchmark. Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/kv/run.sh [build-dir] [kvbench options]   (see bench/README.md)
set -- kv/kvbench "$@"
. "$(dirname "$0")/../run-common.sh"
