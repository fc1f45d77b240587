#!/bin/bash
# usage: sbatch --nodes N scripts/slurm_torchrun.sh [torch_script.py flags]
# torch_script.py across the nodes of a Slurm job: one torchrun agent per node (srun, one
# task per node), the c10d rendezvous on the job's first node, every node's own address
# found by torch_wrapper.agent (docs/parallel.md, "Slurm"). From the checkout, on a shared
# file system:
#     sbatch --nodes 2 scripts/slurm_torchrun.sh --num_epochs 3      # flags go to torch_script.py
# RANKS_PER_NODE (default 1: one process per node on CPU; the GPUs per node otherwise),
# RDZV_PORT (default 29400), and STRATEGY (default data) come from the environment.
# DRY_RUN=1 prints the srun command instead of running it.
#SBATCH --job-name=cnn-parallel
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --output=results/slurm-%j.out
set -euo pipefail

if [[ ${1:-} == --help ]]; then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
fi

# The first host of a Slurm host list: scontrol's answer where Slurm is installed, else
# the list's first entry expanded by hand ("node[07-09,12],gpu1" -> node07).
first_host() {
    local list=$1 prefix inner
    if command -v scontrol >/dev/null; then
        scontrol show hostnames "$list" | head -n 1
        return
    fi
    prefix=${list%%\[*}
    if [[ $list != *\[* || $prefix == *,* ]]; then
        echo "${list%%,*}"
        return
    fi
    inner=${list#*\[}
    inner=${inner%%\]*}
    inner=${inner%%,*}
    echo "$prefix${inner%%-*}"
}

nodes=${SLURM_JOB_NUM_NODES:?run this under sbatch or salloc (SLURM_JOB_NUM_NODES is not set)}
ranks_per_node=${RANKS_PER_NODE:-1}
endpoint="$(first_host "${SLURM_JOB_NODELIST:?SLURM_JOB_NODELIST is not set}"):${RDZV_PORT:-29400}"
command=(
    srun --ntasks-per-node=1 --kill-on-bad-exit=1
    .venv/bin/python -m torch_wrapper.agent --nnodes "$nodes" --nproc_per_node "$ranks_per_node"
    --rdzv_backend c10d --rdzv_endpoint "$endpoint" --rdzv_id "slurm-${SLURM_JOB_ID:-0}"
    torch_script.py --strategy "${STRATEGY:-data}" --devices $((nodes * ranks_per_node)) "$@"
)
if [[ ${DRY_RUN:-0} == 1 ]]; then
    echo "${command[@]}"
else
    exec "${command[@]}"
fi
