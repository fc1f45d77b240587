#!/usr/bin/env bash
# One lent GPU machine's session (docs/gpu.md), run from the repo root: no network, the
# machine's own Python (torch and jax for CUDA, no TensorFlow, no Keras). Installs the Keras
# wheels brought along in .whl/, prints the machine and the versions, then runs
# gpu_check.py (the cuDNN study, and the harness: torch_script.py and keras_script.py on
# torch and jax, default and --parity, twice on the GPU and once on the CPU) within
# BUDGET_S, and leaves in $OUT: session.log, the table (CSV and markdown) and one tar.gz of
# everything the check wrote (the entry scripts' CSVs, settings and results.log).
#   OUT=/tmp/out bash scripts/gpu_session.sh             the GPU session (under 7 minutes)
#   OUT=/tmp/out bash scripts/gpu_session.sh --dry-run   the same on CPU, tiny sizes
# PYTHON (python3), WHEELS (.whl), SITE (/tmp/site), TRAIN (data/train.csv), BUDGET_S (330),
# HARNESS_SHARE (0.6) and GPU_CHECK_ARGS (more of gpu_check.py's flags) change it.
# A part that fails is logged and the next still runs.
set -u
export PYTHONUNBUFFERED=1
PYTHON=${PYTHON:-python3}
WHEELS=${WHEELS:-.whl}
SITE=${SITE:-/tmp/site}
TRAIN=${TRAIN:-data/train.csv}
BUDGET_S=${BUDGET_S:-330}
HARNESS_SHARE=${HARNESS_SHARE:-0.6}
DRY_RUN=""
if [ "${1:-}" = "--help" ] || [ "${1:-}" = "-h" ]; then
    echo "usage: OUT=DIR bash scripts/gpu_session.sh [--dry-run]"
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN="--dry-run"; fi
if [ -z "${OUT:-}" ]; then
    echo "error: set OUT to the folder that comes back" >&2
    exit 2
fi

part() { # part NAME COMMAND...: runs it, logs when it started and how it ended, never stops the session
    local name=$1 rc
    shift
    echo "== $name (at $((SECONDS - started)) s)"
    "$@"
    rc=$?
    if [ "$rc" -ne 0 ]; then echo "== $name: FAILED (exit $rc); going on"; fi
    return 0
}

read -r -d '' MACHINE_SH <<'SH'
nproc
free -g | head -2
nvidia-smi || echo "no nvidia-smi"
echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"
# what --device gpu reads before any framework loads (algorithms/machine/devices.py)
ls /proc/driver/nvidia/gpus || echo "no /proc/driver/nvidia/gpus"; ls /dev/nvidia* || echo "no /dev/nvidia*: --device gpu will refuse"
SH

read -r -d '' VERSIONS_PY <<'PY'
import importlib, os, platform, sys
os.environ.setdefault("KERAS_BACKEND", "jax")  # keras's own default, tensorflow, is not on the machine
print("python", sys.version.split()[0], platform.platform())
for name in ("numpy", "torch", "jax", "keras", "optree", "namex"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as error:  # a missing one is reported, not fatal
        print(name, "NOT IMPORTABLE:", type(error).__name__, error)
try:
    import torch
    print("torch cuda", torch.version.cuda, "available", torch.cuda.is_available(), "cudnn", torch.backends.cudnn.version())
    if torch.cuda.is_available():
        print("torch device", torch.cuda.get_device_name(0))
except Exception as error:
    print("torch cuda:", error)
try:
    import jax
    print("jax devices", jax.devices())
except Exception as error:
    print("jax devices:", error)
PY

session() {
    echo "== gpu session $(date -u +%Y-%m-%dT%H:%M:%SZ) ${DRY_RUN:-(GPU)} in $(pwd)," \
        "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "PYTHON=$PYTHON WHEELS=$WHEELS SITE=$SITE TRAIN=$TRAIN BUDGET_S=$BUDGET_S HARNESS_SHARE=$HARNESS_SHARE"
    part "install the wheels" "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --upgrade --target "$SITE" "$WHEELS"/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
    part "the machine" bash -c "$MACHINE_SH"
    part "versions" timeout 120 "$PYTHON" -c "$VERSIONS_PY"
    local check
    check="$(mktemp -d /tmp/gpu-session-XXXXXX)/gpu_check"
    # gpu_check.py keeps to --budget_s itself (what would start past its share is a "not run"
    # row); the timeout is only a backstop, since a check killed writes no table
    # shellcheck disable=SC2086  # GPU_CHECK_ARGS: several flags
    part "gpu_check.py" timeout -k 15 $((BUDGET_S + 45)) "$PYTHON" gpu_check.py $DRY_RUN --train "$TRAIN" \
        --keras_path "$SITE" --budget_s "$BUDGET_S" --harness_share "$HARNESS_SHARE" --out "$check" \
        ${GPU_CHECK_ARGS:-}
    part "the table to \$OUT" cp "$check"/gpu_check_*.csv "$check"/gpu_check_*.md "$OUT"/
    part "the runs to \$OUT" tar -czf "$OUT/gpu_check_runs.tar.gz" -C "$(dirname "$check")" gpu_check
    ls -la "$OUT"
    echo "== done at $((SECONDS - started)) s"
}

mkdir -p "$OUT"
started=$SECONDS
session 2>&1 | tee -a "$OUT/session.log"
