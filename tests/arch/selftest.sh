#!/bin/bash
# selftest.sh <server dir> <layers.txt>: check_layers.sh must pass on the tree, and fail on a
# copy of it with one upward include added (mvcc including the api) and on a copy with a file
# no layer covers. Without this, a checker that never fails would pass.
set -u
here=$(cd "$(dirname "$0")" && pwd)
srv=${1:?server dir}
table=${2:?layers.txt}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$here/check_layers.sh" "$srv" "$table" || { echo "selftest: the tree itself fails"; exit 1; }
cp -r "$srv" "$tmp/up"
echo '#include "api/api.h"' >>"$tmp/up/mvcc/store.c"
out=$("$here/check_layers.sh" "$tmp/up" "$table")
rc=$?
if [ $rc -ne 1 ] || [[ $out != *"server/mvcc/store.c"*"layer mvcc may not include layer api"* ]]; then
    echo "selftest: an upward include was not reported (rc $rc): $out"
    exit 1
fi
cp -r "$srv" "$tmp/stray"
mkdir -p "$tmp/stray/stray" && echo 'int x;' >"$tmp/stray/stray/x.c"
"$here/check_layers.sh" "$tmp/stray" "$table" >/dev/null
rc=$?
if [ $rc -ne 2 ]; then
    echo "selftest: a file outside every layer was not reported (rc $rc)"
    exit 1
fi
echo "selftest: ok (tree clean; upward include and stray file reported)"
