#!/usr/bin/env bash
# Build real Caffe (pycaffe, CPU only) from the PyPI sdist brocolli-caffe==9.0.2,
# cache the result outside the clone, and make it importable from PYTHON via a .pth file.
# Recipe: /work/shared/RECIPES.md section 3 (two source patches + CMake CPU-only flags).
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: bash caffe_wrapper/build_caffe.sh [PYTHON]

Builds pycaffe (CPU only) from the PyPI sdist brocolli-caffe==9.0.2 with CMake,
caches the built `caffe` package outside the clone and installs a
cnn_parallel_caffe.pth file into PYTHON's site-packages so `import caffe` works.

  PYTHON   interpreter to build for and install into
           (default: <repo root>/.venv/bin/python)

Environment:
  CNN_PARALLEL_CACHE   cache root (default: $HOME/.cache/cnn-parallel);
                       builds live in $CNN_PARALLEL_CACHE/caffe/<key>/
  CAFFE_BUILD_JOBS     parallel make jobs (default: 2)
  CAFFE_KEEP_BUILD=1   keep the temporary build tree (default: removed)

The cache key covers the Debian release, PYTHON's minor version, its numpy
major.minor and a hash of this script (+ caffe_wrapper/patches/*). A cached run
needs no network and no apt (as long as the system libraries are installed).
Cold build: about 10-11 minutes on 2 cores.
EOF
}

case "${1:-}" in
    -h|--help) usage; exit 0 ;;
esac
if [ "$#" -gt 1 ]; then usage >&2; exit 2; fi

T0=$SECONDS
SCRIPT_PATH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
SCRIPT_DIR="$(dirname "$SCRIPT_PATH")"
REPO_ROOT="$(cd "$SCRIPT_DIR/.." && pwd)"
PATCH_DIR="$SCRIPT_DIR/patches"

SDIST_NAME="brocolli-caffe"
SDIST_VERSION="9.0.2"
NSTEPS=7
JOBS="${CAFFE_BUILD_JOBS:-2}"
APT_PKGS=(build-essential cmake libboost-system-dev libboost-thread-dev
          libboost-filesystem-dev libboost-regex-dev libboost-python-dev
          libprotobuf-dev protobuf-compiler libgoogle-glog-dev libgflags-dev
          libhdf5-dev libopenblas-dev)

# ---------------------------------------------------------------- helpers
CUR_STEP="startup"
LOG=""
BUILD_TMP=""
STAGE=""

say()  { echo "[caffe] $*"; }
step() {  # step N "description"
    CUR_STEP="$1/$NSTEPS $2"
    echo "[caffe $1/$NSTEPS] $2 ... (t=$((SECONDS - T0))s)"
}
die()  { echo "[caffe] ERROR: $*" >&2; exit 1; }

on_exit() {
    local rc=$?
    if [ -n "$STAGE" ] && [ -d "$STAGE" ]; then rm -rf "$STAGE"; fi
    if [ -n "$BUILD_TMP" ] && [ -d "$BUILD_TMP" ]; then
        if [ "${CAFFE_KEEP_BUILD:-0}" = "1" ]; then
            say "build tree kept at $BUILD_TMP"
        else
            rm -rf "$BUILD_TMP"
        fi
    fi
    if [ "$rc" -ne 0 ]; then
        echo "[caffe] FAILED in step [$CUR_STEP] (exit $rc, after $((SECONDS - T0))s)" >&2
        if [ -n "$LOG" ] && [ -s "$LOG" ]; then
            echo "[caffe] full log: $LOG ; last lines:" >&2
            tail -n 25 "$LOG" | sed 's/^/    | /' >&2
        fi
    fi
    exit "$rc"
}
trap on_exit EXIT

run_logged() {  # run a command with its output appended to $LOG
    echo "+ $*" >>"$LOG"
    "$@" >>"$LOG" 2>&1
}

# ---------------------------------------------------------------- PYTHON
PYTHON="${1:-$REPO_ROOT/.venv/bin/python}"
case "$PYTHON" in
    */*) PYTHON="$(cd "$(dirname "$PYTHON")" 2>/dev/null && pwd)/$(basename "$PYTHON")" \
             || die "no such directory for PYTHON: $1" ;;
    *)   PYTHON="$(command -v "$PYTHON")" || die "PYTHON not found on PATH: $1" ;;
esac
[ -x "$PYTHON" ] || die "PYTHON is not executable: $PYTHON"

PYINFO="$("$PYTHON" - <<'EOF'
import sys, sysconfig
try:
    import numpy
except ImportError:
    sys.exit("numpy is not installed in this interpreter")
print("%d.%d" % sys.version_info[:2])
print(".".join(numpy.__version__.split(".")[:2]))
print(sysconfig.get_paths()["include"])
print(numpy.get_include())
print(sysconfig.get_paths()["purelib"])
EOF
)" || die "could not query $PYTHON (python + numpy required)"
{ read -r PY_MINOR; read -r NP_MM; read -r PY_INC; read -r NP_INC; read -r SITE_PKGS; } <<<"$PYINFO"
[ -f "$PY_INC/Python.h" ] || die "Python.h not found in $PY_INC (install the python dev headers)"
BOOST_PY_LIB="boost_python${PY_MINOR/./}"     # Debian names it e.g. libboost_python311.so

# ---------------------------------------------------------------- cache key
DEB_VER="$(cat /etc/debian_version 2>/dev/null || echo unknown)"
RECIPE_HASH="$( { cat "$SCRIPT_PATH"
                  if [ -d "$PATCH_DIR" ]; then
                      find "$PATCH_DIR" -type f -print0 | LC_ALL=C sort -z | xargs -0r cat
                  fi; } | sha256sum | cut -c1-12)"
KEY="debian${DEB_VER//\//_}-py${PY_MINOR}-numpy${NP_MM}-${RECIPE_HASH}"
CACHE_PARENT="${CNN_PARALLEL_CACHE:-$HOME/.cache/cnn-parallel}/caffe"
CACHE_DIR="$CACHE_PARENT/$KEY"
MARKER="$CACHE_DIR/.build-complete"
LOG="$CACHE_PARENT/build-$KEY.log"
mkdir -p "$CACHE_PARENT"

say "PYTHON=$PYTHON (python $PY_MINOR, numpy $NP_MM)"
say "cache key: $KEY"

# Serialise concurrent runs for the same cache (a second run waits, then hits the cache).
exec 9>"$CACHE_PARENT/.lock-$KEY"
if ! flock -n 9; then
    say "another build of this key is running; waiting for it ..."
    flock 9
fi

if [ -f "$MARKER" ]; then
    CACHED=1
else
    CACHED=0
    : >"$LOG"                 # fresh log for this build (apt output included)
    say "build log: $LOG"
fi

# ---------------------------------------------------------------- step 1: apt deps
step 1 "checking system packages (apt)"
missing=()
for p in "${APT_PKGS[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "installing missing packages: ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null || die "not root and no sudo; install: ${missing[*]}"
        SUDO="sudo"
    fi
    run_logged $SUDO apt-get update
    run_logged $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}"
else
    say "all ${#APT_PKGS[@]} packages present"
fi

if [ "$CACHED" = 1 ]; then
    say "cache hit: $CACHE_DIR (steps 2-6 skipped)"
else
    [ -e "$CACHE_DIR" ] && { say "removing incomplete cache dir $CACHE_DIR"; rm -rf "$CACHE_DIR"; }
    [ -e "/usr/lib/x86_64-linux-gnu/lib${BOOST_PY_LIB}.so" ] || [ -n "$(ls /usr/lib/*/lib"${BOOST_PY_LIB}".so 2>/dev/null)" ] \
        || die "lib${BOOST_PY_LIB}.so not found: Debian's libboost-python-dev does not support python $PY_MINOR"
    BUILD_TMP="$(mktemp -d "${TMPDIR:-/tmp}/caffe-build.XXXXXX")"

    # ------------------------------------------------------------ step 2: sdist
    step 2 "downloading $SDIST_NAME==$SDIST_VERSION sdist (pip)"
    if "$PYTHON" -m pip --version >/dev/null 2>&1; then PIP=("$PYTHON" -m pip)
    else PIP=(python3 -m pip); fi
    run_logged "${PIP[@]}" download --no-deps --no-binary :all: \
        "$SDIST_NAME==$SDIST_VERSION" -d "$BUILD_TMP/dl"

    # ------------------------------------------------------------ step 3: unpack + patch
    step 3 "unpacking and patching sources"
    tar -xzf "$BUILD_TMP"/dl/*.tar.gz --no-same-owner -C "$BUILD_TMP"
    SRC="$BUILD_TMP/$SDIST_NAME-$SDIST_VERSION"
    [ -f "$SRC/CMakeLists.txt" ] || die "unexpected sdist layout (no $SRC/CMakeLists.txt)"
    run_logged "$PYTHON" - "$SRC" <<'EOF'
import pathlib, sys
src = pathlib.Path(sys.argv[1])

def patch(rel, old, new, why):
    p = src / rel
    text = p.read_text()
    if text.count(old) != 1:
        sys.exit("patch failed (%s): expected exactly one %r in %s" % (why, old, rel))
    p.write_text(text.replace(old, new))
    print("patched %s: %s" % (rel, why))

# 1. Debian only ships the versioned libboost_python3XX: make the name a cache variable.
patch("python/CMakeLists.txt",
      "-lboost_python ",
      "-l${BOOST_PYTHON_LIB} ",
      "boost_python library name from -DBOOST_PYTHON_LIB")
patch("python/CMakeLists.txt",
      "include_directories(${PYTHON_INCLUDE_DIRS}",
      'set(BOOST_PYTHON_LIB "boost_python" CACHE STRING "boost.python library name")\n'
      "include_directories(${PYTHON_INCLUDE_DIRS}",
      "BOOST_PYTHON_LIB cache variable")
# 2. net.cpp includes a gtest header that nothing uses.
patch("src/caffe/net.cpp",
      '#include "caffe/test/test_caffe_main.hpp"\n', "",
      "drop unused gtest include")
# 3. caffe/io.py imports scikit-image and scipy at module level, so `import caffe`
#    fails without them although only load_image()/resize_image() use them.
patch("python/caffe/io.py",
      "import skimage.io\nfrom scipy.ndimage import zoom\n",
      "try:  # optional: only load_image() / resize_image() need these\n"
      "    import skimage.io\n"
      "    from skimage.transform import resize\n"
      "except ImportError:\n"
      "    pass\n"
      "try:\n"
      "    from scipy.ndimage import zoom\n"
      "except ImportError:\n"
      "    pass\n",
      "make scikit-image / scipy imports optional")
# 4. TensorFlow's libtensorflow_framework.so.2 exports its own (newer) protobuf C++
#    symbols globally. If tensorflow is imported first, _caffe.so / libprotobuf.so.32
#    bind to TF's copy and caffe.Net() segfaults in TextFormat::Parse. Loading _caffe.so
#    with RTLD_DEEPBIND makes it (and its libprotobuf) resolve their own symbols first.
patch("python/caffe/__init__.py",
      "from .pycaffe import Net,",
      "import os as _os, sys as _sys\n"
      "_flags = _sys.getdlopenflags()\n"
      "if hasattr(_os, 'RTLD_DEEPBIND'):  # keep TensorFlow's protobuf symbols out of caffe\n"
      "    _sys.setdlopenflags(_flags | _os.RTLD_DEEPBIND)\n"
      "try:\n"
      "    from . import _caffe\n"
      "finally:\n"
      "    _sys.setdlopenflags(_flags)\n"
      "del _os, _sys, _flags\n"
      "from .pycaffe import Net,",
      "load _caffe.so with RTLD_DEEPBIND")
EOF
    # stale prebuilt artefacts shipped in the sdist (py3.8 bytecode, protobuf-3.x caffe_pb2)
    rm -rf "$SRC/python/caffe/__pycache__" "$SRC/python/caffe/proto/caffe_pb2.py"
    if [ -d "$PATCH_DIR" ]; then
        for pf in "$PATCH_DIR"/*.patch; do
            [ -e "$pf" ] || continue
            run_logged patch -d "$SRC" -p1 --forward -i "$pf"
        done
    fi

    # ------------------------------------------------------------ step 4: cmake
    step 4 "configuring (cmake)"
    mkdir -p "$SRC/build"
    ( cd "$SRC/build" && run_logged cmake .. \
        -DCMAKE_BUILD_TYPE=Release \
        -DANACONDA_HOME=/nonexistent \
        -DCPU_ONLY=ON -DUSE_OPENCV=OFF -DUSE_LMDB=OFF -DUSE_LEVELDB=OFF -DUSE_HDF5=OFF \
        -DBUILD_docs=OFF -Dpython_version=3 \
        -DBOOST_PYTHON_LIB="$BOOST_PY_LIB" \
        -DCMAKE_CXX_FLAGS="-I$PY_INC -I$NP_INC -I/usr/include/hdf5/serial" \
        -DCMAKE_SHARED_LINKER_FLAGS="-L/usr/lib/x86_64-linux-gnu/hdf5/serial" )

    # ------------------------------------------------------------ step 5: make
    step 5 "compiling (make -j$JOBS pycaffe; 7-11 min on 2 cores, output in the build log)"
    ( cd "$SRC/build" && run_logged make -j"$JOBS" pycaffe )

    # ------------------------------------------------------------ step 6: package into cache
    step 6 "packaging into cache"
    STAGE="$(mktemp -d "$CACHE_PARENT/.stage-$KEY.XXXXXX")"
    mkdir -p "$STAGE/caffe"
    ( cd "$SRC/python/caffe" && tar --exclude=./test --exclude=__pycache__ \
          --exclude=_caffe.so --exclude='*.cpp' -cf - . ) | tar -xf - --no-same-owner -C "$STAGE/caffe"
    so="$(find "$SRC/build" -name '_caffe.so' -type f | head -n1)"
    [ -n "$so" ] || die "_caffe.so not produced"
    cp "$so" "$STAGE/caffe/_caffe.so"
    strip --strip-unneeded "$STAGE/caffe/_caffe.so"
    [ -f "$STAGE/caffe/proto/caffe_pb2.py" ] || die "caffe_pb2.py was not generated"
    {
        echo "sdist: $SDIST_NAME==$SDIST_VERSION"
        echo "key: $KEY"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) by $SCRIPT_PATH"
        echo "python: $PYTHON ($PY_MINOR), numpy $NP_MM, include $PY_INC, numpy include $NP_INC"
        echo "protoc: $(protoc --version)"
        echo "boost.python: $BOOST_PY_LIB"
    } >"$STAGE/BUILD_INFO"
    chmod 755 "$STAGE"
    mv -T "$STAGE" "$CACHE_DIR"
    STAGE=""
    date -u +%Y-%m-%dT%H:%M:%SZ >"$MARKER"      # written last: marks a finished build
    say "cached $(du -sh "$CACHE_DIR" | cut -f1) in $CACHE_DIR"
fi

# ---------------------------------------------------------------- step 7: install + verify
step 7 "installing .pth into $SITE_PKGS and verifying"
PTH="$SITE_PKGS/cnn_parallel_caffe.pth"
if [ "$(cat "$PTH" 2>/dev/null)" != "$CACHE_DIR" ]; then
    [ -w "$SITE_PKGS" ] || die "$SITE_PKGS is not writable"
    printf '%s\n' "$CACHE_DIR" >"$PTH.tmp.$$"
    mv -f "$PTH.tmp.$$" "$PTH"
    say "wrote $PTH"
else
    say "$PTH already up to date"
fi

VERIFY_PY="$(cat <<'EOF'
import os, sys
os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
if sys.argv[2] == "tf-first":
    import tensorflow  # noqa: F401  (exports a different protobuf; caffe must not bind to it)
import caffe
from caffe.proto import caffe_pb2
from google.protobuf import text_format, __version__ as pb_version

expected = os.path.join(sys.argv[1], "caffe")
got = os.path.dirname(os.path.abspath(caffe.__file__))
if got != expected:
    sys.exit("import caffe picked up %s, expected %s" % (got, expected))
caffe.set_mode_cpu()
src = """name: "roundtrip"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 8 kernel_size: 3 } }
"""
net = text_format.Parse(src, caffe_pb2.NetParameter())
again = text_format.Parse(text_format.MessageToString(net), caffe_pb2.NetParameter())
assert again == net and again.layer[1].convolution_param.num_output == 8
import tempfile
with tempfile.NamedTemporaryFile("w", suffix=".prototxt") as f:
    f.write(text_format.MessageToString(again))
    f.flush()
    cnet = caffe.Net(f.name, caffe.TEST)
    cnet.forward()
assert cnet.blobs["conv"].data.shape == (1, 8, 26, 26), cnet.blobs["conv"].data.shape
if sys.argv[2] == "tf-first":
    print("[caffe] verify: caffe.Net OK with tensorflow imported first")
else:
    print("[caffe] verify: caffe %s from %s, protobuf %s, set_mode_cpu OK, "
          "NetParameter text_format round-trip OK, caffe.Net forward OK"
          % (caffe.__version__, got, pb_version))
EOF
)"
"$PYTHON" -c "$VERIFY_PY" "$CACHE_DIR" plain
# After a fresh build, also check the TensorFlow-first import order (when TF is installed).
if [ "$CACHED" = 0 ] && "$PYTHON" -c "import importlib.util as u, sys; sys.exit(u.find_spec('tensorflow') is None)"; then
    "$PYTHON" -c "$VERIFY_PY" "$CACHE_DIR" tf-first 2>>"$LOG"
fi

say "done in $((SECONDS - T0))s; cache: $CACHE_DIR"
