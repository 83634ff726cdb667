#!/bin/sh
# Runs the lease keepalive benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/lease/run.sh [build-dir] [leasebench options]
#   short run (default): 2,000 leases, 15 s
#   full run:  bench/lease/run.sh build --leases 20000 --duration 60
set -- lease/leasebench "$@"
. "$(dirname "$0")/../run-common.sh"
