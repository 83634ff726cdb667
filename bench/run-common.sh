# Sourced by bench/*/run.sh: finds the build dir (first argument if it is a directory, else
# $KV_BUILD_DIR, else ./build), then runs <build>/bench/$1 with the remaining arguments.
# Builds nothing. Usage from a wrapper: set -- kv/kvbench "$@"; . "$(dirname "$0")/../run-common.sh"
set -eu
rel=$1
shift
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${KV_BUILD_DIR:-$src/build}
if [ $# -gt 0 ] && [ -d "$1" ]; then
    build=$(cd "$1" && pwd)
    shift
fi
bin=$build/bench/$rel
if [ ! -x "$bin" ]; then
    echo "run.sh: $bin not found; build the project first (cmake --build $build)" >&2
    exit 1
fi
export KV_BUILD_DIR="$build"
exec "$bin" "$@"
