#!/bin/sh
# Runs the grpc-proxy benchmark (agents through P proxies), kvd vs etcd 3.4. Builds nothing:
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/proxy/run.sh [build-dir] [proxybench options]   (see bench/README.md)
set -- proxy/proxybench "$@"
. "$(dirname "$0")/../run-common.sh"
