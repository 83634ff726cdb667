#!/bin/bash
# arch-measures.sh [tree]: the architecture figures of one source tree (default: this one),
# measured the same way at any commit, so a change can quote them before and after:
#   git worktree add /tmp/old <rev> && scripts/arch-measures.sh /tmp/old
# Every figure is a grep over the tree; the patterns are printed with the numbers.
set -u
t=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$t" || exit 1
src() { find server client tests bench functional -name '*.[ch]' 2>/dev/null | grep -v '/build'; }
count() { # label, then a command whose output lines are counted
    local label=$1
    shift
    printf '%-58s %6s\n' "$label" "$("$@" | wc -l)"
}
# Folder-level include graph of server/ (a top-level file is folder "server").
edges() {
    (cd server && for f in $(find . -name '*.[ch]' | sed 's#^\./##'); do
        d=$(dirname "$f"); [ "$d" = . ] && d=server
        grep -ho '^#include "[^"]*"' "$f" | sed 's/#include "//; s/"//' | while read -r h; do
            if [ -f "$d/$h" ] && [ "$d" != server ]; then continue; fi
            [ -f "$h" ] || continue
            hd=$(dirname "$h"); [ "$hd" = . ] && hd=server
            [ "$hd" != "$d" ] && echo "$d $hd"
        done
    done) | sort -u
}
E=$(edges)
echo "tree: $t ($(git -C "$t" rev-parse --short HEAD 2>/dev/null))"
printf '%-58s %6s\n' "server/ folder include arrows" "$(echo "$E" | grep -c .)"
printf '%-58s %6s\n' "  folder pairs that include each other (lease/ holds 2 layers)" \
    "$(echo "$E" | awk '{print $1, $2}' | while read -r a b; do echo "$E" | grep -qx "$b $a" && [[ $a < $b ]] && echo x; done | wc -l)"
printf '%-58s %6s\n' "  top-level server/*.c files" "$(ls server/*.c 2>/dev/null | wc -l)"
printf '%-58s %6s\n' "  api files including server.h" "$(grep -l '#include "server.h"' server/api/*.[ch] 2>/dev/null | wc -l)"
if [ -x tests/arch/check_layers.sh ]; then
    printf '%-58s %6s\n' "  includes tests/arch/layers.txt forbids" "$(tests/arch/check_layers.sh server tests/arch/layers.txt | grep -c '^layers:')"
fi
count "CMake guards (OPTIONAL, if(TARGET, if(EXISTS, IF_EXISTS)" \
    grep -rnE 'OPTIONAL\)|if\(TARGET|if\(EXISTS|IF_EXISTS' --include=CMakeLists.txt --include='*.cmake' server client tests bench functional CMakeLists.txt
count "hand-rolled list links (struct X *next/*prev fields)" \
    grep -nE '^\s*struct [a-z_]+ \*(next|prev)\b.*;|^\s*struct [a-z_]+ \*(prev|next), \*(prev|next);' $(src)
count "intrusive list header users (common/list.h)" grep -l '"common/list.h"' $(src)
count "64-bit hash finalisers (murmur's 0xff51afd7ed558ccd, mix64 functions)" \
    grep -nE '0xff51afd7ed558ccd|uint64_t [a-z_]*mix64[a-z_]*\(uint64_t' $(src)
count "LMDB error mappers (files switching on MDB_ codes)" grep -lE 'case MDB_(MAP_FULL|TXN_FULL)' $(src)
count "gRPC status names below the api (node/ apply/ mvcc/)" grep -nE 'KV_GRPC_[A-Z_]+' server/node server/apply server/mvcc -r
count "nghttp2 client sessions outside client/ and tests/lib" \
    bash -c "grep -rln 'nghttp2_session_client_new' server tests bench functional --include='*.c' | grep -v '^tests/lib/\|^server/peer/'"
count "process launchers (execv*) outside tests/lib and kvctl" \
    bash -c "grep -rlnE 'execv[pe]?\(' server tests bench functional --include='*.c' | grep -v '^tests/lib/\|^server/'"
count "private recursive removals (nftw, system(\"rm -rf))" \
    bash -c "grep -rlnE 'nftw\(|system\(\"rm -rf' tests bench functional --include='*.c' | grep -v '^tests/lib/\|^tests/crash/pcjournal'"
count "cr_skip_test sites (a skip that exits 0)" grep -rn 'cr_skip_test' tests functional --include='*.c'
count "KVT_SKIP_MISSING sites (fail in CI, skip by hand)" grep -rn 'KVT_SKIP_MISSING(' tests functional --include='*.c'
count "comments citing an issue number (issue N)" grep -rnE '[Ii]ssue #?[0-9]+' server client raft tests bench functional docs README.md --include='*.[ch]' --include='*.md'
