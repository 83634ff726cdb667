#!/bin/sh
# Runs the restart-to-serving benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/startup/run.sh [build-dir] [startbench options]   (see bench/README.md)
set -- startup/startbench "$@"
. "$(dirname "$0")/../run-common.sh"
