#!/bin/sh
# Runs the 3-member cluster benchmark, kvd vs etcd 3.4. Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/cluster/run.sh [build-dir] [clusterbench options]   (see bench/README.md)
set -- cluster/clusterbench "$@"
. "$(dirname "$0")/../run-common.sh"
