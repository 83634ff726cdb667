#!/bin/sh
# Runs the login-flood benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/auth/run.sh [build-dir] [authbench options]   (see bench/README.md)
set -- auth/authbench "$@"
. "$(dirname "$0")/../run-common.sh"
