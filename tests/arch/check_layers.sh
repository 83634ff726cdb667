#!/bin/bash
# check_layers.sh <server dir> <layers.txt>: every #include "dir/file.h" of a file under
# server/ that names a server header must point to the file's own layer or to a layer its row
# of layers.txt allows. Prints each violation (file, line, include, the two layers) and exits 1
# if there is any; exits 2 if a server file belongs to no layer or to two (the table must cover
# the tree exactly). The CMake libraries enforce the same order at link time; this check also
# catches an upward include of a header-only declaration, which no linker sees.
set -u
srv=${1:?server dir}
table=${2:?layers.txt}
declare -A allow pat
order=()
while IFS= read -r line; do
    line=${line%%#*}
    [[ $line =~ ^[[:space:]]*$ ]] && continue
    name=$(awk '{print $1}' <<<"$line")
    globs=$(sed 's/^[^ ]* *//; s/:.*//' <<<"$line")
    deps=$(sed 's/^[^:]*://' <<<"$line")
    pat[$name]=$globs
    allow[$name]=" $name $(echo $deps) "
    order+=("$name")
done <"$table"

layer_of() { # path relative to server/ -> layer name(s), space-separated
    local f=$1 out="" n g
    for n in "${order[@]}"; do
        for g in ${pat[$n]}; do
            # shellcheck disable=SC2053
            if [[ $f == $g ]]; then
                out+="$n "
                break
            fi
        done
    done
    echo "$out"
}

bad=0
cd "$srv" || exit 2
declare -A cache
while IFS= read -r f; do
    f=${f#./}
    l=$(layer_of "$f")
    set -- $l
    if [ $# -ne 1 ]; then
        echo "layers: $f belongs to ${#}: '${l}' layers (layers.txt must cover every file once)"
        exit 2
    fi
    me=$1
    while IFS=: read -r ln inc; do
        h=$(sed 's/^#include "//; s/".*//' <<<"$inc")
        [ -f "$h" ] || continue # a generated (.pb-c.h) or same-folder header
        if [ -z "${cache[$h]+x}" ]; then
            cache[$h]=$(layer_of "$h")
        fi
        set -- ${cache[$h]}
        [ $# -eq 1 ] || continue # reported when that file itself is checked
        to=$1
        if [[ ${allow[$me]} != *" $to "* ]]; then
            echo "layers: server/$f:$ln includes \"$h\": layer $me may not include layer $to"
            bad=1
        fi
    done < <(grep -n '^#include "[a-z_0-9]*/[^"]*"' "$f")
done < <(find . -name '*.[ch]' | sort)
exit $bad
