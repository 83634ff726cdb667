#!/bin/bash
# check_layers.sh <server dir> <layers.txt>: every #include "dir/file.h" of a file under
# server/ that names a server header must point to the file's own layer or to a layer its row
# of layers.txt allows. Prints each violation (file, line, include, the two layers) and exits 1
# if there is any; exits 2 if a server file belongs to no layer or to two (the table must cover
# the tree exactly). The CMake libraries enforce the same order at link time; this check also
# catches an upward include of a header-only declaration, which no linker sees.
set -u -f # -f: the globs of layers.txt are patterns for [[ == ]], never expanded against the tree
srv=${1:?server dir}
table=${2:?layers.txt}
declare -A allow pat
order=()
while IFS= read -r line; do
    line=${line%%#*}
    [[ $line =~ ^[[:space:]]*([^[:space:]]+)[[:space:]]+([^:]*):(.*)$ ]] || continue
    name=${BASH_REMATCH[1]}
    pat[$name]=${BASH_REMATCH[2]}
    deps=(${BASH_REMATCH[3]})
    allow[$name]=" $name ${deps[*]} "
    order+=("$name")
done <"$table"

# layer_of <path relative to server/>: sets $layers to the file's layer name(s), space-separated.
# Bash builtins only (no subshell per file or include): the check runs in well under a second.
layer_of() {
    local f=$1 n g
    layers=""
    for n in "${order[@]}"; do
        for g in ${pat[$n]}; do
            # shellcheck disable=SC2053
            if [[ $f == $g ]]; then
                layers+="$n "
                break
            fi
        done
    done
}

bad=0
cd "$srv" || exit 2
declare -A cache mine
# Every file's own layer first (exactly one each), then every include, from one grep of the tree.
while IFS= read -r f; do
    f=${f#./}
    layer_of "$f"
    l=$layers
    set -- $l
    if [ $# -ne 1 ]; then
        echo "layers: $f belongs to ${#}: '${l}' layers (layers.txt must cover every file once)"
        exit 2
    fi
    mine[$f]=$1
done < <(find . -name '*.[ch]' | sort)
while IFS=: read -r f ln inc; do
    f=${f#./}
    me=${mine[$f]}
    h=${inc#\#include \"}
    h=${h%%\"*}
    [ -f "$h" ] || continue # a generated (.pb-c.h) or same-folder header
    if [ -z "${cache[$h]+x}" ]; then
        layer_of "$h"
        cache[$h]=$layers
    fi
    set -- ${cache[$h]}
    [ $# -eq 1 ] || continue # reported when that file itself is checked
    to=$1
    if [[ ${allow[$me]} != *" $to "* ]]; then
        echo "layers: server/$f:$ln includes \"$h\": layer $me may not include layer $to"
        bad=1
    fi
done < <(find . -name '*.[ch]' -print0 | sort -z | xargs -0 grep -Hn '^#include "[a-z_0-9]*/[^"]*"')
exit $bad
