#!/bin/sh
# Runs the Watch benchmark (kvd vs etcd). Builds nothing: build first, e.g.
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build build -j2
# Usage: bench/watch/run.sh [build-dir] [watchbench options]
#   full run (issue 11): defaults (10,000 watchers / 100 streams, 1,000 puts/s for 10 s;
#   catch-up of 1,000 watchers from 100,000 events ago)
set -- watch/watchbench "$@"
. "$(dirname "$0")/../run-common.sh"
