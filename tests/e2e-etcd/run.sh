#!/usr/bin/env bash
# tests/e2e-etcd/run.sh - etcd 3.4's own end-to-end suite (tests/e2e in Debian's
# golang-etcd-server-dev) against kvd as the server binary. See README.md.
#
#   run.sh [--target kvd|etcd] [--all] [--share K] [--run REGEX] [--cluster-proxy] [BUILD_DIR]
#
# --target etcd   the same list against /usr/bin/etcd (measures the expectation)
# --all           every test that is not skipped (the default in CI is a share, see below)
# --share K       CI's share: the tests whose index i satisfies i % K == commit % K, where
#                 commit is the number of commits in HEAD's history (rotates every commit);
#                 default K=1 (everything) unless --ci-share is given
# --run REGEX     only tests whose name matches REGEX (after the skip list)
# --cluster-proxy etcd's cluster_proxy build of the suite: every client talks to a gRPC proxy
#                 (`kvd grpc-proxy start`; etcd's own with --target etcd) in front of each
#                 member; failures listed in expected-failures-proxy.txt are expected
# BUILD_DIR       kvd's build tree (default: build); the e2e binary is built there once.
#
# Prints one line per test and a closing "e2e-etcd: N passed, N failed, N skipped" line;
# exits 1 on a failure not listed in expected-failures.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
target=kvd
share=1
only=""
proxy=0
while [ $# -gt 0 ]; do
    case "$1" in
    --target) target=$2; shift 2 ;;
    --all) share=1; shift ;;
    --share) share=$2; shift 2 ;;
    --run) only=$2; shift 2 ;;
    --cluster-proxy) proxy=1; shift ;;
    -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
build=$(cd "${1:-$top/build}" && pwd) || { echo "run.sh: no build dir" >&2; exit 2; }
src=/usr/share/gocode/src/go.etcd.io/etcd
fixtures=$src/integration/fixtures
[ -d "$src/tests/e2e" ] || { echo "run.sh: $src/tests/e2e missing (apt-get install golang-etcd-server-dev)" >&2; exit 2; }
command -v go >/dev/null || { echo "run.sh: go missing (apt-get install golang-go)" >&2; exit 2; }
work=$build/e2e-etcd
mkdir -p "$work/bin-kvd" "$work/bin-kvdpx" "$work/bin-etcd" "$work/logs"
# --cluster-proxy: etcd's own cluster_proxy build of the suite, where every member gets a
# `etcd grpc-proxy start` (and a v2 proxy) in front of it and the clients talk to the proxy.
test_bin=e2e.test
tags=""
if [ "$proxy" -eq 1 ]; then
    test_bin=e2e-proxy.test
    tags="-tags cluster_proxy"
    mkdir -p "$work/logs-proxy"
fi

# 1. The test binary, built offline from Debian's sources (GOPATH mode), once per build dir.
if [ ! -x "$work/$test_bin" ] || [ "$src/tests/e2e/main_test.go" -nt "$work/$test_bin" ]; then
    echo "==== e2e-etcd: building etcd's tests/e2e $tags (offline, GOPATH=/usr/share/gocode)"
    # shellcheck disable=SC2086 # $tags is one word or none
    (cd "$src/tests/e2e" && GOPATH=/usr/share/gocode GO111MODULE=off GOPROXY=off GOFLAGS= \
        GOCACHE="$work/gocache" nice go test -c $tags -o "$work/$test_bin" .) || exit 2
fi

# 2. The bin dirs: etcd is kvd (or etcd itself); etcdctl is Debian's etcdctl 3.4.
printf '#!/bin/sh\nexec %s "$@"\n' "$build/server/kvd" > "$work/bin-kvd/etcd"
chmod +x "$work/bin-kvd/etcd"
ln -sf /usr/bin/etcdctl "$work/bin-kvd/etcdctl"
# The cluster_proxy harness also starts a v2 proxy (`etcd --proxy on`) beside every member and
# waits for its "httpproxy: endpoints found". kvd serves no v2 API and the v2 tests are skipped
# (skip.txt), so a placeholder that prints that line and sleeps stands in for it; the gRPC
# proxy, which every v3 client of the suite talks to, is `kvd grpc-proxy start`.
cat > "$work/bin-kvdpx/etcd" <<EOF
#!/bin/sh
case " \$* " in
*" --proxy on "*) echo "httpproxy: endpoints found (placeholder: kvd serves no v2 API)"; exec sleep 86400 ;;
esac
exec $build/server/kvd "\$@"
EOF
chmod +x "$work/bin-kvdpx/etcd"
ln -sf /usr/bin/etcdctl "$work/bin-kvdpx/etcdctl"
ln -sf /usr/bin/etcd "$work/bin-etcd/etcd"
ln -sf /usr/bin/etcdctl "$work/bin-etcd/etcdctl"
bindir=$work/bin-$target
logs=$work/logs
expected_file=$here/expected-failures.txt
if [ "$proxy" -eq 1 ]; then
    [ "$target" = kvd ] && bindir=$work/bin-kvdpx
    logs=$work/logs-proxy
    expected_file=$here/expected-failures-proxy.txt
fi

# 3. The list: every test, less the skip list, less the share.
skip_re=$(grep -v '^#' "$here/skip.txt" | sed 's/ *#.*//' | grep -v '^$' | paste -sd'|')
mapfile -t all < <("$work/$test_bin" -test.list '.*' | grep '^Test' | grep -Ev "^(${skip_re})\$")
nskip=$(( $("$work/$test_bin" -test.list '.*' | grep -c '^Test') - ${#all[@]} ))
commits=$(git -C "$top" rev-list --count HEAD 2>/dev/null || echo 0)
expected=$(grep -v '^#' "$expected_file" | sed 's/ *#.*//' | grep -v '^$' || true)
pass=0; fail=0; unexpected=0; fixed=""; failed=""
i=0
for t in "${all[@]}"; do
    i=$((i + 1))
    if [ "$share" -gt 1 ] && [ $(( i % share )) -ne $(( commits % share )) ]; then
        nskip=$((nskip + 1)); continue
    fi
    if [ -n "$only" ] && ! [[ $t =~ $only ]]; then
        nskip=$((nskip + 1)); continue
    fi
    # Each test alone, in the e2e dir (some tests read files relative to it), with a bound.
    log=$logs/$t.log
    t0=$(date +%s)
    for attempt in 1 2; do # a failure runs once more (README.md, "Flakes and retries")
        (cd "$src/tests/e2e" && timeout 600 "$work/$test_bin" -test.run "^${t}\$" -test.v \
            -test.timeout 540s -bin-dir "$bindir" -cert-dir "$fixtures") > "$log" 2>&1
        rc=$?
        [ $rc -eq 0 ] && grep -q "^--- PASS: $t " "$log" && break
        grep -qx "$t" <<< "$expected" && break # expected to fail: no second try
        [ $attempt -eq 1 ] && echo "retry $t"
    done
    dt=$(( $(date +%s) - t0 ))
    is_expected=0
    grep -qx "$t" <<< "$expected" && is_expected=1
    if [ $rc -eq 0 ] && grep -q "^--- PASS: $t " "$log"; then
        pass=$((pass + 1)); echo "PASS $t (${dt}s)"
        [ $is_expected -eq 1 ] && fixed="$fixed $t"
    else
        fail=$((fail + 1)); failed="$failed $t"
        if [ $is_expected -eq 1 ] || [ "$target" = etcd ]; then
            echo "FAIL $t (${dt}s, expected: see expected-failures.txt)"
        else
            unexpected=$((unexpected + 1))
            echo "FAIL $t (${dt}s): $log"
            grep -E -- '--- FAIL|_test.go:[0-9]+:' "$log" | head -5 | sed 's/^/    /'
        fi
    fi
done
[ -n "$fixed" ] && echo "e2e-etcd: listed as expected failures but passed (remove them):$fixed"
[ -n "$failed" ] && echo "e2e-etcd: failed:$failed"
echo "e2e-etcd ($target): $pass passed, $fail failed, $nskip skipped"
[ $unexpected -eq 0 ]
