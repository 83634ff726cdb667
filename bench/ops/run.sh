#!/bin/sh
# Runs the snapshot/defrag benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/tls/run.sh [build-dir] [opsbench options]   (see bench/README.md)
set -- ops/opsbench "$@"
. "$(dirname "$0")/../run-common.sh"
