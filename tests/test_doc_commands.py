"""Every command shown in README.md and docs/*.md, run as written (tests/test_docs.py finds
them and checks their --help), in a copy of the checkout whose data/ holds the small data
set: so a command writes into the copy's results/ and data/, never the repository's. Each
run gets the harness's own caps appended (CAPS: a few steps, one epoch's worth), and what
its page says it does is asserted (CLAIMS: exit 0, the files it writes, a CSV's rows read
back, a verdict printed). A command that is not run is in NOT_RUN with the reason, or in
STAND_INS with the command run in its place; a shown command in neither fails the suite."""

from __future__ import annotations

import glob
import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest

from algorithms.paths import LEGACY_PYTHON, REPO_ROOT
from algorithms.records import read_rows
from tests.conftest import copy_checkout, outside_make
from tests.test_docs import COMMAND_DOCS, ENV_ASSIGNMENT, FENCE, shown_commands


def normal(command: str) -> str:
    """A shown command's words without its comment, one space apart: the key of the tables
    below (the same command on two pages is one entry)."""
    return " ".join(shlex.split(command, comments=True))


def all_shown() -> tuple:
    """(normal command -> the places ("doc:line") that show it, in the order of the pages;
    normal command -> the command as shown)."""
    shown, text = {}, {}
    for doc in COMMAND_DOCS:
        for line, command in shown_commands(doc):
            shown.setdefault(normal(command), []).append(f"{doc}:{line}")
            text.setdefault(normal(command), command)
    return shown, text


SHOWN, TEXT = all_shown()

SUITE = "the test suite itself, which runs this file"
TWO_HOSTS = "two hosts (a rendezvous at 10.0.0.1 across a network)"
# Shown commands that are not run, each with the reason; where another test runs what the
# command does, it is named.
NOT_RUN = {
    "make test": SUITE,
    "make test-fast": SUITE,
    "make test ARGS=-k verdict": SUITE,
    "XDIST=0 make test-fast": SUITE,
    ".venv-legacy/bin/python -m pytest -q tests/legacy": SUITE + " (`make test` runs tests/legacy/ beside tests/)",
    "make baseline": "hours on 2 cores: every framework, both networks, seeds 0-2 and the default's seeds 0-9",
    "make power-whole ARGS=--only tensorflow,torch --num_epochs 6": "an hour on 2 cores: 14 whole runs of the "
    "main network and 9 of the examples; tests/test_whole_runs.py runs the study on 24 steps of TensorFlow and torch",
    "make power": "tens of minutes: every error of the confusion table in both modes, on the envelope runs; "
    "tests/test_power.py runs the study on its own short envelope runs",
    "make envelope ARGS=--run_id envelope50": "minutes: every main-env framework twice with its thread and "
    "summation-order variants, 50 steps, both modes; docs/own-network.md's `drift --envelope` runs the same "
    "study capped here, and tests/test_verdict_runs.py judges against one",
    "make envelope": "as `make envelope ARGS=--run_id envelope50`",
    "make drift": "every framework (legacy and Caffe too) twice and at bf16, 100 steps: minutes; "
    "docs/comparing.md's `python -m algorithms.studies.drift --only torch,tensorflow,keras_jax` runs the "
    "same study capped here",
    "make legacy-setup": "builds .venv-legacy (pip installs into the shared env); `make test` builds it first "
    "and tests/test_environments.py holds a failed build's message",
    "make legacy-setup LEGACY_PYTHON=python3.11": "as `make legacy-setup`",
    "make caffe": "builds pycaffe (11 minutes the first time); `make test` builds it first and the tests marked "
    "caffe use it",
    "make gpu-check ARGS=--keras_path vendor/keras": "needs a GPU (and a vendor/keras the page's reader "
    "brings); tests/test_gpu_check.py runs the script's --dry-run",
    ".venv/bin/python torch_script.py --strategy data --devices 2 --dp_impl dataparallel": "needs 2 GPUs "
    "(nn.DataParallel); on a CPU it is refused, which tests/test_parallel_torch.py checks",
    ".venv/bin/tensorboard --logdir results/tensorboard/RUN_ID": "a server that runs until it is stopped, "
    "and RUN_ID is a placeholder; README.md's `python -m algorithms.analysis.tensorboard` writes the event "
    "files it reads, and tests/test_tensorboard.py reads them back with TensorBoard's own reader",
    ".venv/bin/python -m algorithms.analysis.compare A.csv@RUN_ID_1 A.csv@RUN_ID_2 --accuracies 0.9,0.95": (
        "A.csv and RUN_ID_n are placeholders; the compare of two runs named by @RUN_ID runs as "
        "docs/comparing.md's results/cases example"
    ),
    ".venv/bin/python -m algorithms.analysis.compare results/cnn2d_3layer_fullconnected_3layer_torch.csv@RUN-single "
    "results/cnn2d_3layer_fullconnected_3layer_torch.csv@RUN-data": (
        "RUN is the run id run_all.py --strategies printed above it; tests/test_parallel_verdict.py compares "
        "torch's single and data runs with the compare"
    ),
    ".venv/bin/python -m algorithms.analysis.tensorboard "
    "results/cnn2d_3layer_fullconnected_3layer_torch.csv@RUN_ID "
    "results/cnn2d_3layer_fullconnected_3layer_lasagne_theano.csv@RUN_ID --logdir results/tensorboard": (
        "RUN_ID is a placeholder; the conversion runs as README.md's command over every CSV, "
        "and tests/test_tensorboard.py converts a legacy-env CSV"
    ),
    ".venv/bin/python -m torch_wrapper.agent --nnodes 2 --nproc_per_node 1 --rdzv_backend c10d "
    "--rdzv_endpoint 10.0.0.1:29400 --rdzv_id cnn-run-1 torch_script.py --strategy data --devices 2": TWO_HOSTS
    + "; tests/test_two_hosts_torch.py runs torch_wrapper.agent on two network namespaces",
    "GLOO_SOCKET_IFNAME=eth0 .venv/bin/python -m torch.distributed.run --nnodes 2 --nproc_per_node 1 "
    "--rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29400 --rdzv_id cnn-run-1 --rdzv_conf is_host=1 "
    "--local_addr 10.0.0.1 torch_script.py --strategy data --devices 2": TWO_HOSTS
    + "; tests/test_two_hosts_torch.py::test_plain_torchrun_across_hosts_needs_the_three_flags_and_binds_every_"
    "interface",
    "GLOO_SOCKET_IFNAME=eth0 .venv/bin/python -m torch.distributed.run --nnodes 2 --nproc_per_node 1 "
    "--rdzv_backend c10d --rdzv_endpoint 10.0.0.1:29400 --rdzv_id cnn-run-1 --rdzv_conf is_host=0 "
    "--local_addr 10.0.0.2 torch_script.py --strategy data --devices 2": TWO_HOSTS
    + "; tests/test_two_hosts_torch.py::test_plain_torchrun_across_hosts_needs_the_three_flags_and_binds_every_"
    "interface",
    ".venv/bin/python torch_script.py --strategy ps --devices 2 --ps_endpoint 10.0.0.1:29500 --remote_workers 1": (
        TWO_HOSTS + "; tests/test_two_hosts_torch.py::"
        "test_a_parameter_server_run_with_a_worker_on_the_other_host_equals_one_host"
    ),
    ".venv/bin/python -m torch_wrapper.asynchronous.ps_worker --worker 1 --strategy ps --devices 2 "
    "--ps_endpoint 10.0.0.1:29500 --remote_workers 1": TWO_HOSTS
    + "; tests/test_two_hosts_torch.py::test_a_parameter_server_run_with_a_worker_on_the_other_host_equals_one_host",
    ".venv/bin/python scripts/netns_cluster.py --hosts 2 -- .venv/bin/python -m torch_wrapper.agent --nnodes 2 "
    "--nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint {first}:29400 --rdzv_id rehearsal "
    "torch_script.py --strategy data --devices 2 -- .venv/bin/python -m torch_wrapper.agent --nnodes 2 "
    "--nproc_per_node 1 --rdzv_backend c10d --rdzv_endpoint {first}:29400 --rdzv_id rehearsal "
    "torch_script.py --strategy data --devices 2": "root and network namespaces, which tests/helpers/netns.py "
    "gives one group of tests at a time; tests/test_two_hosts_torch.py runs this rehearsal",
    ".venv/bin/python -m algorithms.interconnect.network_cost": "root (network namespaces) and minutes "
    "(every strategy at four rates); tests/test_network_cost.py runs it at one rate",
    ".venv/bin/python scripts/netns_cluster.py --hosts 2 --delay_ms 5 -- .venv/bin/python scripts/ping.py "
    "10.77.0.2 --count 5 -- sleep 2": "root (network namespaces); tests/test_netns_cluster.py builds such "
    "clusters and tests/test_network_latency.py measures their delay",
    ".venv/bin/python -m algorithms.interconnect.network_latency": "root (network namespaces) and minutes "
    "(five strategies at five delays); tests/test_network_latency.py runs it at one delay",
    "sbatch --nodes 2 scripts/slurm_torchrun.sh --num_epochs 3": "a Slurm cluster; tests/test_launch_recipes.py "
    "runs the script's rendezvous and command derivation outside one",
    ".venv/bin/python run_all.py --versions keras==3.14.0 keras==3.15.1 --only keras_torch --parity": "installs "
    "Keras 3.14.0 from the registry (minutes on a busy machine); tests/test_release_envs.py runs --versions with "
    "a release env of its own (identical: same; planted: beyond drift, localised)",
    ".venv/bin/python run_all.py --versions keras==3.14.0 keras==3.15.1 --only keras_torch --parity --localise "
    "--network examples/bn_32x32x3.toml --train data/colour_digits_train.npz --test data/colour_digits_test.npz": ""
    "installs Keras 3.14.0 and 3.15.1 from the registry; tests/test_release_envs.py localises a planted change on "
    "the batch-norm example across two releases' environments",
    ".venv/bin/python -m algorithms.studies.support_window --versions keras==3.0.0 keras==3.15.1 --only keras_torch": ""
    "installs Keras 3.0.0 from the registry; tests/test_release_envs.py runs the study on the oldest and newest "
    "supported Keras on each backend",
}
# Commands grouped with another: what they run, the shown command named runs here (or the test
# named runs it), with the same script on the same path; they differ in a flag --help checks
# (tests/test_docs.py), a framework, or a size. Grouped to keep this file's runs within its budget.
V = ".venv/bin/python "
GROUPED = {
    # batch-size.md
    V + "torch_script.py --batch_size auto --num_epochs 3": "tests/test_batch_finder.py, whose "
    "test_the_finder_trains_with_its_choice_and_leaves_it_ten_steps_an_epoch runs torch_script.py --batch_size auto "
    "(its trials take a minute and a half on a busy machine)",
    V + "tensorflow_script.py --batch_size auto --memory_budget_mb 2000": "batch-size.md's torch --batch_size auto "
    "(the finder is one, in algorithms/); tests/test_batch_finder.py times every wrapper's trials",
    "KERAS_BACKEND=jax " + V + "keras_script.py --batch_size auto": "batch-size.md's torch --batch_size auto "
    "(the finder is one); tests/test_batch_finder.py times every wrapper's trials",
    V
    + "tensorflow_script.py --strategy data --devices 2 --batch_size 100 --num_epochs 3 --noise_scale": "batch-size.md"
    "'s torch --noise_scale; tests/test_noise_scale_runs.py runs TensorFlow's",
    V
    + "tensorflow_script.py --strategy data --devices 2 --num_epochs 4 --batch_schedule 1:100,3:200": "batch-size.md's "
    "torch --batch_schedule (the schedule is one); tests/test_batch_schedule.py runs it in every framework",
    "KERAS_BACKEND=jax " + V + "keras_script.py --num_epochs 4 --batch_schedule 1:100,3:200": "batch-size.md's torch "
    "--batch_schedule (the schedule is one); tests/test_batch_schedule.py runs it in every framework",
    V + "-m algorithms.studies.batch_study --framework keras_jax --batch 50 --factor 5 --decay_epochs 3,5": "the "
    "study's torch command above it, for another framework (its arms are --batch_schedule and --lr_schedule runs, "
    "which tests/test_batch_schedule.py runs in Keras)",
    # benchmark.md
    V + "benchmark.py --only torch,tensorflow --steps 12 --profile none": "benchmark.md's `benchmark.py`, "
    "which runs with the same caps (--steps 2, --profile none) for torch",
    V + "benchmark.py --malloc release": "benchmark.md's `benchmark.py` with another --malloc; tests/test_benchmark.py "
    "holds what each malloc policy sets",
    V + "benchmark.py --precision fp32,bf16": "benchmark.md's `benchmark.py`; tests/test_benchmark_precision.py runs "
    "its rows at each precision",
    V + "benchmark.py --precision fp32,bf16,fp16 --only torch,tensorflow,keras_tensorflow": "benchmark.md's "
    "`benchmark.py`; tests/test_benchmark_precision.py runs its rows at each precision",
    V + "benchmark.py --tuned --rounds 3": "benchmark.md's `benchmark.py`; tests/test_tuned.py runs benchmark.py "
    "with a setting beside the defaults",
    V + "benchmark.py --only keras_jax --candidates --rounds 3": "benchmark.md's `benchmark.py`; tests/test_tuned.py "
    "runs benchmark.py with a setting beside the defaults",
    V + "-m algorithms.studies.execution_sweep --only torch,tensorflow,keras_tensorflow,keras_jax "
    "--batches 8,32,128,512,1024 --steps 12": "the sweep's first command, over more frameworks and batches",
    # comparing.md
    V + "-m algorithms.studies.drift --only torch,tensorflow,keras_jax --steps 50 --low_precision bf16": "the drift "
    "command above it (bf16 is the default third run)",
    V + "-m algorithms.studies.drift --only torch,tensorflow --steps 100 --strategy async --devices 2": "the drift "
    "command above, with a strategy; tests/test_async_torch.py runs the study with --strategy async",
    V + "-m algorithms.studies.drift --only torch,tensorflow --steps 100 --strategy ps --devices 2": "the drift "
    "command above, with a strategy; tests/test_async_torch.py runs the study with an asynchronous strategy",
    V + "-m algorithms.localisation.localise --only torch --fault torch:frozen:9": "the localise command of a "
    "weights fault above it (the same fault path, another kind); tests/test_no_gradient.py localises a frozen bias",
    V + "-m algorithms.localisation.localise": "the localise commands below it, which run torch and TensorFlow; "
    "tests/test_localise.py runs the others",
    V + "-m algorithms.localisation.localise --only torch,caffe --steps 3 --batch_size 16": "the localise commands "
    "below it; tests/test_localise.py runs Caffe and several steps",
    V + "scaling_report.py --frameworks torch,tensorflow --devices 1,2,4 --batch_size 512": "the report's first "
    "command, for two frameworks at three device counts",
    V + "scaling_report.py --frameworks torch --strategy tensor --devices 1,2": "the report's first command, at "
    "another strategy",
    V + "scaling_report.py --frameworks torch,tensorflow,keras_jax --strategy tensor --devices 1,2": "the report's "
    "first command, at another strategy and for three frameworks",
    V + "scaling_report.py --frameworks torch,tensorflow --strategy pipeline --devices 1,2 --micro_batches 4": "the "
    "report's first command, at another strategy",
    V
    + "scaling_report.py --frameworks torch --strategy async --devices 1,2,4 --max_steps 100000 --num_epochs 3": "the "
    "report's first command; tests/test_async_torch.py runs the report with --strategy async",
    # gpu.md
    "OUT=/tmp/gpu_out PYTHON=.venv/bin/python WHEELS=.whl-cp311 BUDGET_S=900 bash scripts/gpu_session.sh --dry-run": (
        "11 minutes on 2 cores and cp311 wheels the page's reader downloads; tests/test_gpu_check.py runs "
        "`gpu_check.py --dry-run`, which is what the session runs after installing the wheels"
    ),
    "make gpu-check ARGS=--dry-run": "tests/test_gpu_check.py runs `gpu_check.py --dry-run`, the recipe with its ARGS",
    # own-network.md
    V + "run_all.py --network examples/digits_8x8.toml --train data/digits_8x8_train.npz "
    "--test data/digits_8x8_test.npz": "own-network.md's run_all of bn_32x32x3.toml, with another network file; "
    "tests/test_own_network_runs.py trains digits_8x8.toml in every framework",
    V + "-m algorithms.bench.memory_estimate --only torch,caffe": "minutes: two frameworks at six settings, "
    "each under the footprint sampler; tests/test_resources.py measures the estimate against a torch run's peak "
    "with its functions",
    # parallel.md
    **{
        V + f"torch_script.py --strategy {flags}": f"parallel.md's torch data command (the same loop); "
        f"{test} runs --strategy {flags.split()[0]}"
        for flags, test in (
            ("model --devices 2", "tests/test_parallel_torch.py"),
            ("tensor --devices 2", "tests/test_parallel_torch.py"),
            ("pipeline --devices 2 --micro_batches 4", "tests/test_parallel_torch.py"),
            ("hybrid --devices 4 --inner tensor", "tests/test_parallel_torch.py"),
            ("async --devices 2", "tests/test_worker_strategies.py"),
            ("ps --devices 2", "tests/test_worker_strategies.py"),
            ("ps --devices 2 --ps_sync", "tests/test_worker_strategies.py"),
            ("localsgd --devices 2 --sync_every 4", "tests/test_worker_strategies.py"),
        )
    },
    **{
        env + V + f"{script} --strategy {flags}": f"parallel.md's TensorFlow data command; {test} runs --strategy "
        f"{flags.split()[0]}"
        for env, script, flags, test in (
            ("", "tensorflow_script.py", "model --devices 2", "tests/test_parallel_tf.py"),
            (
                "KERAS_BACKEND=tensorflow ",
                "keras_script.py",
                "data --devices 2 --batch_size 256",
                "tests/test_parallel_keras.py",
            ),
            (
                "KERAS_BACKEND=jax ",
                "keras_script.py",
                "data --devices 2 --batch_size 256",
                "tests/test_parallel_keras.py",
            ),
            ("", "tensorflow_script.py", "tensor --devices 2", "tests/test_parallel_tf.py"),
            ("", "tensorflow_script.py", "pipeline --devices 2 --micro_batches 4", "tests/test_parallel_tf.py"),
            ("KERAS_BACKEND=jax ", "keras_script.py", "tensor --devices 2", "tests/test_parallel_keras_tensor.py"),
            (
                "KERAS_BACKEND=jax ",
                "keras_script.py",
                "hybrid --devices 4 --group 2 --inner tensor",
                "tests/test_parallel_keras_tensor.py",
            ),
        )
    },
    V + "tensorflow_script.py --strategy ps --devices 2 --ps_tasks 1 --batch_size 32 --num_epochs 3": "parallel.md's "
    "TensorFlow data command; tests/test_ps_tf.py runs --strategy ps with its worker and ps processes",
    V + "-m algorithms.bench.footprint -- .venv/bin/python tensorflow_script.py --strategy data --devices 32 "
    "--batch_size 64 --max_steps 3 --test none --quiet": "the footprint command above it, of another run; "
    "tests/test_resources.py measures many devices",
}
NOT_RUN.update({command: "grouped with " + why for command, why in GROUPED.items()})
TF_WORKER = '{"cluster": {"worker": ["node-a:12345", "node-b:12345"]}, "task": {"type": "worker", "index": %d}}'
TF_PS = (
    '{"cluster": {"chief": ["node-a:2222"], "worker": ["node-b:2222", "node-c:2222"], "ps": ["node-d:2222"]}, '
    '"task": {"type": "%s", "index": %d}}'
)
for index in (0, 1):
    NOT_RUN[
        f"TF_CONFIG={TF_WORKER % index} .venv/bin/python tensorflow_script.py --strategy data "
        "--devices 2 --batch_size 256"
    ] = "two hosts (node-a, node-b); tests/test_two_hosts_tf.py runs MultiWorkerMirroredStrategy on two namespaces"
for task, index, extra in (("worker", 0, ""), ("worker", 1, ""), ("ps", 0, ""), ("chief", 0, " --batch_size 32")):
    NOT_RUN[
        f"TF_CONFIG={TF_PS % (task, index)} .venv/bin/python tensorflow_script.py --strategy ps --devices 2{extra}"
    ] = "four hosts; tests/test_two_hosts_tf.py runs parameter servers on three namespaces"

# Commands run in another's place: a make target as the command its recipe runs, capped.
STAND_INS = {
    "make compare": (
        ".venv/bin/python run_all.py --only torch,keras_jax --num_epochs 3",
        "the recipe is `run_all.py $(ARGS)`: README.md's run_all of two frameworks, run once for both",
    ),
    "make benchmark": (".venv/bin/python benchmark.py", "the recipe is `benchmark.py $(ARGS)`"),
}

ENTRY_CAPS = ["--max_steps", "2"]
QUICK_BENCHMARK = ["--batch_size", "32", "--steps", "2", "--thread_steps", "0", "--gemm", "256"]
QUICK_BENCHMARK += ["--data_rows", "300", "--skip_compiled", "--profile", "none", "--rounds", "1"]
# What is appended to a command, by the script or module it runs: the last of a flag given
# twice wins, so a cap replaces the page's value.
CAPS = {
    "torch_script.py": ENTRY_CAPS,
    "tensorflow_script.py": ENTRY_CAPS,
    "keras_script.py": ENTRY_CAPS,
    "keras_tensorflow_backend.py": ENTRY_CAPS,
    "keras_theano_backend.py": ENTRY_CAPS,
    "lasagne_script.py": ENTRY_CAPS,
    "caffe_script.py": ENTRY_CAPS,
    "run_all.py": ENTRY_CAPS,
    "scaling_report.py": ENTRY_CAPS,
    "benchmark.py": QUICK_BENCHMARK,
    "algorithms.studies.batch_study": ENTRY_CAPS,
    "algorithms.studies.execution_sweep": ["--batches", "8", "--steps", "4"],
    "algorithms.studies.drift": ["--steps", "2"],
    "gpu_check.py": [],
    "scripts/example_data.py": [],  # seconds: the full example sets, which run_all's caps keep short
}
# Caps appended only where the command does not give the flag itself: fewer frameworks
TWO = "torch,tensorflow"
WEAK_CAPS = {
    "run_all.py": {"--only": TWO},
    "benchmark.py": {"--only": "torch"},
    "algorithms.localisation.localise": {"--only": TWO},
    "algorithms.studies.execution_sweep": {"--only": "torch"},
}
# the default data's 3,200 training rows, for a batch (schedule, accumulation) past the small data's 480
FULL_TRAIN = ["--train", "data/full/train.csv"]
STEPS_21, STEPS_23 = ["--max_steps", "21"], ["--max_steps", "23"]
# Commands whose caps differ from their script's
COMMAND_CAPS = {
    ".venv/bin/python torch_script.py --num_epochs 6 --batch_schedule 1:128,3:256,5:512 --lr_scaling linear": [
        *FULL_TRAIN,
        *ENTRY_CAPS,
    ],
    ".venv/bin/python tensorflow_script.py --strategy data --devices 2 --batch_size 250 --accumulate 4 "
    "--lr_scaling linear --warmup_steps 20 --reduce_lr_on_plateau 2 --early_stopping 4": [*FULL_TRAIN, *ENTRY_CAPS],
    # two frameworks, no third (bf16) run: four runs, not nine
    ".venv/bin/python -m algorithms.studies.drift --only torch,tensorflow,keras_jax --steps 100": [
        "--steps",
        "2",
        "--only",
        "torch,tensorflow",
        "--low_precision",
        "none",
    ],
    # the run goes a step past its first checkpoint (batch 100: the preset's 1000 is more than
    # the small data's 480 rows), and the resume, with the same flags, two steps further
    ".venv/bin/python torch_script.py --checkpoint_every 20 --run_id my-run": ["--batch_size", "100", *STEPS_21],
    ".venv/bin/python torch_script.py --checkpoint_every 20 --resume my-run": ["--batch_size", "100", *STEPS_23],
}


def quoted_false_alarms() -> list:
    """(beyond, judged) of each row of docs/comparing.md's false-alarm table, with the cap
    (the shipped rule): what `python -m algorithms.analysis.false_alarms` must print."""
    with open(os.path.join(REPO_ROOT, "docs", "comparing.md"), encoding="utf-8") as handle:
        table = handle.read().split("| what is judged | with the cap (shipped) |", 1)[1].split("\n\n", 1)[0]
    counts = [re.match(r"(\d+) of (\d+)", row.split("|")[2].strip()) for row in table.splitlines()[2:]]
    assert len(counts) >= 5 and all(counts), "docs/comparing.md's false-alarm table changed its form"
    return [count.groups() for count in counts]


VERDICTS = r"(?m)^verdicts against "
# a pair's verdict in the compare's report, or the reason it has none
PAIR_VERDICT = r"(?m)^  .*\b(within|beyond|no verdict)\b"
# The exit status a command's page says it ends with, where not 0
EXIT_STATUS = {
    ".venv/bin/python -m algorithms.localisation.localise --only torch,tensorflow --fault torch:weights:3:1.1": 1,
    ".venv/bin/python -m algorithms.localisation.localise --only torch --fault torch:frozen:9": 1,
}
# What a command's page says it does, beyond exit 0 and its "rows in" CSVs (checked for every
# entry script): ("file", glob in the copy) exists, ("prints", regex) matches its output.
CLAIMS = {
    "make compare": [("prints", VERDICTS), ("file", "results/compare/*.html")],
    ".venv/bin/python run_all.py --only torch,keras_jax --num_epochs 3": [("prints", VERDICTS)],
    ".venv/bin/python run_all.py --parity --only torch,tensorflow --max_steps 100": [("prints", VERDICTS)],
    ".venv/bin/python run_all.py --network examples/bn_32x32x3.toml --train data/colour_digits_train.npz "
    "--test data/colour_digits_test.npz": [("prints", VERDICTS)],
    ".venv/bin/python run_all.py --network digits_cnn.onnx --train data/digits_8x8_train.npz "
    "--test data/digits_8x8_test.npz": [("prints", VERDICTS)],
    ".venv/bin/python -m algorithms.localisation.localise --structure_only": [("prints", r"(?m)^torch: as the spec$")],
    # a finding exits 1 (EXIT_STATUS), and names the layer the fault is in
    ".venv/bin/python -m algorithms.localisation.localise --only torch,tensorflow --fault torch:weights:3:1.1": [
        ("prints", r"torch \(fault put in: weights:3:1.1\): layer 3 Conv2D")
    ],
    ".venv/bin/python -m algorithms.localisation.localise --only torch --fault torch:frozen:9": [
        ("prints", r"layer 9 Dense 128 bias: no gradient")
    ],
    ".venv/bin/python -m algorithms.studies.drift --only torch,tensorflow,keras_jax --steps 100": [
        ("prints", r"bit-identical|run-to-run")
    ],
    ".venv/bin/python scaling_report.py --frameworks torch --devices 1,2 --max_steps 20": [
        ("file", "results/scaling/*.csv")
    ],
    ".venv/bin/python -m algorithms.analysis.tensorboard": [("file", "results/tensorboard/*/torch/events.out.*")],
    ".venv/bin/python -m algorithms.registry.capabilities": [("prints", r"^\| framework \|")],
    ".venv/bin/python -m algorithms.machine.openblas --threads 2": [
        ("prints", r"^BLAS of Theano and Caffe: OpenBLAS 0\.\d+\.\d+, \w+ kernels .* SGEMM \d+ GFLOP/s")
    ],
    ".venv/bin/python -m algorithms.analysis.compare results/cnn2d_3layer_fullconnected_3layer_torch.csv "
    "results/cnn2d_3layer_fullconnected_3layer_keras_jax.csv": [("prints", PAIR_VERDICT)],
    ".venv/bin/python -m algorithms.analysis.compare "
    "results/cases/cnn2d_3layer_fullconnected_3layer_tensorflow.csv@default "
    "results/cases/cnn2d_3layer_fullconnected_3layer_torch.csv@halflr": [("prints", PAIR_VERDICT)],
    ".venv/bin/python scripts/example_data.py": [
        ("file", f"data/{name}_{part}.npz") for name in ("colour_digits", "digits_8x8") for part in ("train", "test")
    ]
    + [("file", f"data/digits_8x8_train_images/{digit}/*.png") for digit in range(10)],
    ".venv/bin/python torch_script.py --checkpoint_every 20 --run_id my-run": [
        ("file", "results/checkpoints/my-run/*")
    ],
    ".venv/bin/python torch_script.py --checkpoint_every 20 --resume my-run": [
        ("prints", r"resuming run my-run .* from \S+/step-0000020")
    ],
    ".venv/bin/python benchmark.py": [("file", "results/benchmark/benchmark_*.csv")],
    ".venv/bin/python -m algorithms.studies.execution_sweep": [("file", "results/benchmark/*-execution-sweep.csv")],
    ".venv/bin/python -m algorithms.studies.batch_study": [("prints", r"(?m)^rows: ")],
    # a run at chance is outside every band (docs/comparing.md#few-seeds): far from any threshold on every machine
    ".venv/bin/python -m algorithms.analysis.band_power": [
        ("prints", r"(?m)^  at chance  +(1\.000 / 0\.000 / 0\.000 +){2}1\.000 / 0\.000 / 0\.000$")
    ],
    # the counts docs/comparing.md quotes, as the command prints them
    ".venv/bin/python -m algorithms.analysis.false_alarms": [
        ("prints", rf"(?m)^  .*\s{beyond} of {judged}\s") for beyond, judged in quoted_false_alarms()
    ],
}
# Commands that need another's output: run it first (each runs once, whatever selects it)
NEEDS = {
    ".venv/bin/python -m algorithms.analysis.compare results/cnn2d_3layer_fullconnected_3layer_torch.csv "
    "results/cnn2d_3layer_fullconnected_3layer_keras_jax.csv": [
        ".venv/bin/python run_all.py --only torch,keras_jax --num_epochs 3"
    ],
    ".venv/bin/python -m algorithms.analysis.tensorboard": [
        ".venv/bin/python run_all.py --only torch,keras_jax --num_epochs 3"
    ],
    ".venv/bin/python torch_script.py --checkpoint_every 20 --resume my-run": [
        ".venv/bin/python torch_script.py --checkpoint_every 20 --run_id my-run"
    ],
}
# every command that reads data/*.npz needs example_data.py first
for command in SHOWN:
    if "_train.npz" in command or "_train_images" in command:
        NEEDS.setdefault(command, []).append(".venv/bin/python scripts/example_data.py")


def program_of(words: list) -> str:
    """The script or module a command runs (its CAPS key)."""
    args = words[1:]
    if args[:2] == ["-m", "torch.distributed.run"]:
        return next(arg for arg in args if arg.endswith(".py"))
    if args and args[0] == "-m":
        return args[1]
    return args[0] if args else words[0]


def argv_of(command: str) -> tuple:
    """(environment, argv) to run a shown command (or its stand-in) with its caps."""
    run = STAND_INS[command][0] if command in STAND_INS else TEXT[command]
    words = shlex.split(run, comments=True)
    env = {}
    while ENV_ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if words[0] in ("python", "python3"):
        words[0] = ".venv/bin/python"
    if "--help" in words:
        return env, words
    caps = COMMAND_CAPS.get(command, CAPS.get(program_of(words), []))
    for flag, value in WEAK_CAPS.get(program_of(words), {}).items():
        caps = caps + [flag, value] * (flag not in words)
    return env, words + caps


def legacy_reason(command: str):
    uses_legacy = any(name in command for name in ("lasagne", "theano", ".venv-legacy"))
    if uses_legacy and not os.path.exists(LEGACY_PYTHON):
        return f"{LEGACY_PYTHON} is missing (`make legacy-setup` builds it; CI has it)"
    return None


@pytest.fixture(scope="module")
def docs_checkout(tmp_path_factory, small_data, full_data):
    """A copy of the checkout with the shared venvs linked in and the small data set as
    data/: the pages' relative paths (.venv/bin/python, data/train.csv, results/) work as shown."""
    copy = copy_checkout(tmp_path_factory.mktemp("docs") / "checkout")
    os.symlink(sys.prefix, copy / ".venv")
    if os.path.exists(LEGACY_PYTHON):
        os.symlink(os.path.realpath(os.path.dirname(os.path.dirname(LEGACY_PYTHON))), copy / ".venv-legacy")
    for name in ("train.csv", "test.csv", "test_labels.csv"):
        (copy / "data" / name).write_bytes((small_data / name).read_bytes())
    (copy / "data" / "full").mkdir()
    (copy / "data" / "full" / "train.csv").write_bytes((full_data / "train.csv").read_bytes())
    return copy


@pytest.fixture(scope="module")
def runs(docs_checkout):
    """command -> its finished process, what it needs run first; two commands that come to
    the same run (a make target and its recipe's command) run once."""
    done = {}

    def run(command: str) -> subprocess.CompletedProcess:
        for needed in NEEDS.get(command, []):
            run(needed)
        env, argv = argv_of(command)
        key = (tuple(sorted(env.items())), tuple(argv))
        if key not in done:
            if "digits_cnn.onnx" in command:  # the model the page's Python block exports, run as shown
                export = [sys.executable, "-c", onnx_block()]
                subprocess.run(export, cwd=docs_checkout, check=True, capture_output=True, timeout=300)
            done[key] = subprocess.run(
                argv,
                cwd=docs_checkout,
                env={**outside_make(), "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **env},
                capture_output=True,
                text=True,
                timeout=600,
            )
        return done[key]

    return run


def test_every_shown_command_is_run_or_says_why_not():
    assert len(SHOWN) >= 100, f"only {len(SHOWN)} shown commands found: has shown_commands changed?"
    unaccounted = [f"{SHOWN[c][0]}: {c}" for c in SHOWN if c not in NOT_RUN and argv_of(c)[1][0] == "make"]
    assert not unaccounted, "shown make targets with neither a stand-in nor a reason: " + "; ".join(unaccounted)
    for table in (NOT_RUN, STAND_INS, CLAIMS, COMMAND_CAPS, NEEDS, EXIT_STATUS):
        stale = [command for command in table if command not in SHOWN]
        assert not stale, f"commands no page shows any more (drop them from the table): {stale}"
    assert not set(NOT_RUN) & set(STAND_INS)
    assert all(len(reason) > 20 for reason in NOT_RUN.values())
    named = {name for reason in NOT_RUN.values() for name in re.findall(r"tests/[\w/]+\.py", reason)}
    assert all(os.path.exists(os.path.join(REPO_ROOT, name)) for name in named), "a reason names a missing test"


def test_every_script_a_shown_command_runs_has_its_caps():
    """A command without a cap would run for minutes: a new script needs its CAPS entry."""
    uncapped = []
    for command in SHOWN:
        if command in NOT_RUN:
            continue
        words = argv_of(command)[1]
        program = program_of(words)
        if program.endswith(".py") and program not in CAPS and command not in COMMAND_CAPS and "--help" not in words:
            uncapped.append(f"{SHOWN[command][0]}: {program}")
    assert not uncapped, "scripts without CAPS: " + "; ".join(uncapped)


def command_param(command: str):
    marks = [pytest.mark.slow]
    if "caffe" in command and "build_caffe" not in command:
        marks.append(pytest.mark.caffe)
    return pytest.param(command, marks=marks, id=f"{SHOWN[command][0]} {command[:80]}")


RUN = [command for command in SHOWN if command not in NOT_RUN]


@pytest.mark.parametrize("command", [command_param(command) for command in RUN])
def test_a_shown_command_does_what_its_page_says(command, runs, docs_checkout):
    reason = legacy_reason(command)
    if reason:
        pytest.skip(reason)
    proc = runs(command)
    where = ", ".join(SHOWN[command])
    shown = f"{where}: {' '.join(argv_of(command)[1])}"
    assert proc.returncode == EXIT_STATUS.get(command, 0), (
        f"{shown} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
    output = proc.stdout + proc.stderr
    for place in ("results", "data"):
        assert os.path.join(REPO_ROOT, place) + os.sep not in output, f"{shown} wrote into the repository's {place}/"
    for csv_path, run_id in re.findall(r"rows in (\S+\.csv) · run (\S+)", output):
        assert csv_path.startswith(str(docs_checkout)), f"{shown}: rows outside the copy: {csv_path}"
        rows = read_rows(csv_path, run_id)
        assert any(row["phase"] == "train" for row in rows), f"{shown}: no train rows of run {run_id} in {csv_path}"
    for kind, what in CLAIMS.get(command, []):
        if kind == "file":
            assert glob.glob(str(docs_checkout / what)), f"{shown}: wrote no {what}"
        else:
            assert re.search(what, output), f"{shown}: printed nothing matching {what!r}:\n{output[-3000:]}"


def onnx_block() -> str:
    """The Python block of docs/own-network.md that exports digits_cnn.onnx."""
    with open(os.path.join(REPO_ROOT, "docs", "own-network.md"), encoding="utf-8") as handle:
        blocks = [block.group(2) for block in FENCE.finditer(handle.read()) if block.group(1).strip() == "python"]
    (block,) = [block for block in blocks if "digits_cnn.onnx" in block]
    return block


def test_every_module_a_page_names_for_python_m_exists():
    """`python -m NAME` in a page's prose, too (a code block's is run above): NAME is a module
    of this repository (its file or package's __main__.py) or of an installed package."""
    missing = []
    for doc in COMMAND_DOCS:
        with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as handle:
            names = set(re.findall(r"python -m ([A-Za-z_][\w.]*)", handle.read()))
        for name in sorted(names):
            path = os.path.join(REPO_ROOT, *name.split("."))
            if os.path.isdir(os.path.join(REPO_ROOT, name.split(".")[0])):
                if not (os.path.isfile(path + ".py") or os.path.isfile(os.path.join(path, "__main__.py"))):
                    missing.append(f"{doc}: {name}")
            elif importlib.util.find_spec(name.split(".")[0]) is None:
                missing.append(f"{doc}: {name}")
    assert not missing, "pages name modules that do not exist: " + "; ".join(missing)
