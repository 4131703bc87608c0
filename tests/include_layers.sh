#!/usr/bin/env bash
# The source tree's layering, checked on its #include lines:
#   core < format < (io, reference, kernels, moe, parallel) < backends
#        < (bench, shapes, multigpu) < report < cli
# No file may include a header of a higher layer, the include graph has no
# cycle, and only the backends include src/backends/ headers (everyone else
# reaches them through fp4/backend.h). Public headers belong to the layer that
# implements them.
# Usage: include_layers.sh [REPO_ROOT]; prints each bad arrow, exit 1 if any.
set -u
ROOT=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$ROOT" || exit 2

rank() {
    case $1 in
    core) echo 0 ;; format) echo 1 ;; io | reference | kernels | moe | parallel) echo 2 ;;
    backends) echo 3 ;; bench | shapes | multigpu) echo 4 ;; report) echo 5 ;; cli) echo 6 ;;
    *) echo -1 ;;
    esac
}

# The layer of a file in the tree (src/LAYER/... or include/fp4/NAME.h).
layer_of() {
    case $1 in
    src/*) local rest=${1#src/}; echo "${rest%%/*}" ;;
    include/fp4/status.h) echo core ;;
    include/fp4/format.h) echo format ;;
    include/fp4/io.h) echo io ;;
    include/fp4/reference.h) echo reference ;;
    include/fp4/moe.h) echo moe ;;
    include/fp4/parallel.h) echo parallel ;;
    include/fp4/multigpu.h) echo multigpu ;;
    include/fp4/backend.h | include/fp4/moe_backend.h) echo backends ;;
    include/fp4/shapes.h) echo shapes ;;
    include/fp4/stats.h | include/fp4/device.h | include/fp4/engine.h | include/fp4/moe_engine.h) echo bench ;;
    include/fp4/report.h) echo report ;;
    *) echo unknown ;;
    esac
}

# The file an include names: "fp4/X.h" is public, "LAYER/..." is under src/.
resolve() {
    case $1 in
    fp4/*) echo "include/$1" ;;
    */*) echo "src/$1" ;;
    *) echo "" ;; # a sibling or generated header (fp4_version.h): no arrow to check
    esac
}

bad=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
while IFS= read -r file; do
    from=$(layer_of "$file")
    if [ "$(rank "$from")" -lt 0 ]; then
        echo "unknown layer: $file"
        bad=1
        continue
    fi
    while IFS= read -r inc; do
        target=$(resolve "$inc")
        [ -n "$target" ] || continue
        if [ ! -e "$target" ]; then
            echo "$file includes missing $inc"
            bad=1
            continue
        fi
        echo "$file $target" >>"$edges"
        to=$(layer_of "$target")
        why=""
        if [ "$(rank "$to")" -gt "$(rank "$from")" ]; then
            why="UP"
        elif [ "$to" = backends ] && [ "$from" != backends ] && [ "${target#include/}" = "$target" ]; then
            why="PRIVATE"
        fi
        if [ -n "$why" ]; then
            echo "$why: $file ($from) includes $inc ($to)"
            bad=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src include -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

# tsort fails on a cycle and names its members.
if ! tsort "$edges" >/dev/null 2>"$edges.err"; then
    echo "include cycle:"
    cat "$edges.err"
    bad=1
fi
rm -f "$edges.err"
[ $bad -eq 0 ] && echo "include layers: ok"
exit $bad
