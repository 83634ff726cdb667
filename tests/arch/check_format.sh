#!/usr/bin/env bash
# Every C source and header of the repository is formatted as .clang-format says (the house
# rule): clang-format --dry-run -Werror over the files git tracks (or, outside a git checkout,
# every .c/.h under the top folders). clang-format 14 (Debian 12's clang-format-14, installed
# by scripts/install-deps.sh --with-test-extras): another version formats some constructs
# differently. Exit 77 (ctest: skipped) when it is missing; in CI nothing may skip
# (KVT_NO_SKIP), so it fails there instead.
set -euo pipefail
src=${1:?usage: check_format.sh <source dir>}
cd "$src"
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "check_format: clang-format is not installed"
  [ -n "${KVT_NO_SKIP:-}" ] && exit 1
  exit 77
fi
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files '*.c' '*.h')
else
  mapfile -t files < <(find server client raft tests bench functional -name '*.c' -o -name '*.h')
fi
out=$("$cf" --dry-run -Werror "${files[@]}" 2>&1 || true)
bad=$(printf '%s\n' "$out" | grep -oE '^[^ :]+\.[ch]:[0-9]+' | cut -d: -f1 | sort -u || true)
if [ -n "$bad" ]; then
  echo "check_format: not formatted as .clang-format says (run: clang-format -i <file>):"
  printf '  %s\n' $bad
  printf '%s\n' "$out" | head -n 40
  exit 1
fi
echo "check_format: ${#files[@]} files formatted ($("$cf" --version))"
