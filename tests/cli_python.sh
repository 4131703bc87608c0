#!/usr/bin/env bash
# The Python package (python/, docs/PYTHON.md) against this build: its unittest
# suite (quantize / dequantize / reference / check bit for bit with the CLI, the
# statistics against the library's, JSON that `fp4bench compare` reads, bench()
# on the CPU), then `pip install ./python` into a throw-away venv and the quick
# start from there. No torch and no GPU needed.
# $1 = the fp4bench program (libfp4.so beside it), $2 = the tests' bin folder.
# Exit 77 (skipped) without a python3 >= 3.10 that has numpy.
set -u
FP4=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
BUILD=$(dirname "$FP4")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LIB=$BUILD/libfp4.so

PY=""
for cand in python3 /usr/bin/python3; do
    p=$(command -v "$cand" 2>/dev/null) || continue
    if "$p" -c 'import sys, numpy; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        PY=$p
        break
    fi
done
if [ -z "$PY" ]; then
    echo "skipped: no python3 >= 3.10 with numpy (Debian: apt-get install python3-numpy)"
    exit 77
fi
if [ ! -e "$LIB" ]; then
    echo "FAIL: $LIB is missing (the fp4_shared target builds it)" >&2
    exit 1
fi
export FP4BENCH=$FP4 FP4BENCH_LIB=$LIB
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
failures=0
echo "python: $PY ($("$PY" --version 2>&1)), library: $LIB"

# 1. the suite, from the source tree (tests/_util.py puts python/ first on the path)
if ! "$PY" -m unittest discover -s "$ROOT/python/tests" -p 'test_*.py' -v 2>"$TMP/unittest.log"; then
    cat "$TMP/unittest.log" >&2
    failures=$((failures + 1))
else
    tail -3 "$TMP/unittest.log"
fi

# 2. pip install ./python into a venv, offline (the system's numpy and setuptools
# through --system-site-packages); skipped where venv or pip cannot work offline
if "$PY" -m venv --system-site-packages "$TMP/venv" >"$TMP/venv.log" 2>&1 &&
    "$TMP/venv/bin/python" -m pip --version >/dev/null 2>&1; then
    cp -r "$ROOT/python" "$TMP/src" # the build leaves build/ and *.egg-info: not in the tree
    if "$TMP/venv/bin/python" -m pip install --no-index --no-build-isolation "$TMP/src" \
        >"$TMP/pip.log" 2>&1; then
        # the quick start of docs/PYTHON.md, run from elsewhere with the installed package
        if ! (cd "$TMP" && "$TMP/venv/bin/python" - <<'EOF'
import fp4bench, numpy as np
assert "site-packages" in fp4bench.__file__, fp4bench.__file__
a, w = (fp4bench.quantize(np.random.randn(*s).astype(np.float32)) for s in [(16, 256), (64, 256)])
v = fp4bench.check(fp4bench.dequantize(a) @ fp4bench.dequantize(w).T, a, w)
print(v)
assert v.passed
rep = fp4bench.bench({"numpy": lambda ops: ops.alpha_f * (ops.a_dq @ ops.b_dq.T)},
                     [(4, 32, 64)], device="cpu", max_time=0.2, warmup_ms=0, progress=False)
assert rep.rows[0].state == "ok" and rep.rows[0].verified == 1, rep.rows[0]
print("installed package: ok")
EOF
        ); then
            echo "FAIL: the installed package's quick start" >&2
            failures=$((failures + 1))
        fi
    elif grep -qE "No matching distribution|Could not find a version|No module named '?(setuptools|wheel)|Cannot import 'setuptools" "$TMP/pip.log"; then
        echo "skipped the pip install check: it cannot run offline here: $(grep -m1 -E 'ERROR|No module' "$TMP/pip.log")"
    else
        cat "$TMP/pip.log" >&2
        echo "FAIL: pip install ./python" >&2
        failures=$((failures + 1))
    fi
else
    echo "skipped the pip install check: no venv with pip here ($(tail -1 "$TMP/venv.log"))"
fi

if [ $failures -ne 0 ]; then
    echo "cli_python: $failures part(s) failed" >&2
    exit 1
fi
echo "cli_python: ok"
