#!/usr/bin/env bash
# Installs what kvd needs to build and test on Debian 12 (bookworm). Idempotent.
set -euo pipefail
PKGS=(build-essential cmake pkg-config git curl procps iproute2
      libuv1-dev libprotobuf-c-dev protobuf-c-compiler liblmdb-dev libnghttp2-dev
      libssl-dev libcriterion-dev libcrypt-dev
      clang libclang-rt-14-dev
      etcd-client etcd-server)
# --with-test-extras (used by .ci/run): what only some tests need. golang-go and Debian's Go
# etcd sources (~900 MB) let tests/go build a clientv3/concurrency program offline.
# clang-format-14: tests/arch checks every C file against .clang-format.
# prometheus (and promtool): tests/metrics runs its own server on a free port with a temp
# config and storage; policy-rc.d below keeps the package's service from starting.
if [ "${1:-}" = "--with-test-extras" ]; then
  PKGS+=(golang-go golang-etcd-server-dev prometheus clang-format-14)
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # policy-rc.d keeps the etcd-server package from starting a system etcd on :2379 (and
  # prometheus a system Prometheus on :9090).
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    trap '$SUDO rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
