#!/bin/sh
# Runs the compaction benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/compact/run.sh [build-dir] [compactbench options]   (see bench/README.md)
set -- compact/compactbench "$@"
. "$(dirname "$0")/../run-common.sh"
