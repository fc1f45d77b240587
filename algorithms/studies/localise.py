"""Where a difference enters: every framework's layers against a float64 reference.

    python -m algorithms.studies.localise [--only torch,caffe] [--steps 3] [--batch_size 8]
        [--network NAME] [--seed 0] [--train data/train.csv] [--structure_only]
        [--fault torch:weights:3:1.1] [--results_dir results/localise]

First the structural check, which costs nothing: every framework's parameter tensors,
their shapes (in its own layout) and count against the spec; a missing bias or a
transposed kernel is named before anything runs (`--structure_only` stops there).
Then one batch of the training data (the shared batch order's first, with --seed) goes
through every framework at the shared initial weights with dropout off, each in its own
process and venv, and each layer's output and each parameter's gradient is compared with
the float64 numpy reference of the spec (algorithms/spec/reference.py). With --steps K,
steps 2..K do the same at the reference trajectory's weights (the spec's optimizer, in
float64, on the next batches), loaded afresh into every framework each step, so an
error cannot compound: each step is a fresh look at one layer stack.

Printed: a table per pass (framework x layer, the worst relative error over the steps),
the first layer beyond float32 tolerance marked, and a line per framework saying where
its difference entered (NaN or inf where the reference is finite: a class of its own).
Written under --results_dir: <id>.png (the heatmap) and <id>.csv (every cell), never over
an earlier run's. --fault FRAMEWORK:KIND:LAYER:VALUE puts a known error into one
framework (algorithms/spec/variants.py: weights, padding, bias), to see it found.
Exit status: 0 when every framework is within tolerance everywhere, 1 otherwise, 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace

import numpy as np

from algorithms.analysis.localisation import Localisation, compare_pass
from algorithms.analysis.localisation_report import format_localisation, plot_heatmap, write_cells_csv
from algorithms.analysis.structure import first_structural_layer, structural_problems
from algorithms.errors import EXIT_INPUT_ERROR, InputError
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN, REPO_ROOT, RESULTS_DIR
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import NAMES, get
from algorithms.run.config import OPTIONAL_FLAGS
from algorithms.run.flags import OneLineErrorParser
from algorithms.run.session import new_run_id
from algorithms.spec.data import batch_order, ensure_default_data, load_dataset, steps_per_epoch
from algorithms.spec.networks import DEFAULT_NETWORK, NETWORKS, Dropout, get_network
from algorithms.spec.reference import forward_backward, sgd_or_adam_step
from algorithms.spec.variants import parse_fault
from algorithms.spec.weights import LayerWeights, initial_weights
from algorithms.studies import children
from algorithms.tables import last_line

DEFAULT_BATCH = 8  # a few images: every layer's values are seen, and the slowest framework stays quick
CHILD_TIMEOUT_S = 1800  # Theano compiles its graph in the child, minutes on a cold cache


# The digits' blank background is exactly 0: with zero initial biases the first layers'
# pre-activations there are exactly 0 (ReLU's kink), and once the biases move, whole
# pooling windows tie exactly (max-pool's kink). At a kink the derivative is a convention:
# Theano takes ReLU'(0) = 1/2 and sends a tied window's gradient to every maximum, the
# others to one, and which one float32 rounding decides. Less than one grey level of
# noise (the dither) moves every image off the kinks, where the derivative is unique;
# --no_dither compares at the data's own values, kinks and all.
DITHER = 1.0 / 255


def batches(train_path: str, network, steps: int, batch_size: int, seed: int, dither: bool = True) -> list:
    """The first `steps` batches of the shared batch order (images, labels) of the training
    split, with `dither` each pixel plus uniform noise below one grey level (DITHER)."""
    if os.path.abspath(train_path) == DEFAULT_TRAIN and not os.path.exists(DEFAULT_TRAIN):
        ensure_default_data(DEFAULT_DATA_DIR)
    dataset = load_dataset(train_path, None, None, network.training.validation_split, seed)
    per_epoch = steps_per_epoch(len(dataset.train_x), batch_size)
    chosen = []
    for step in range(steps):
        rows = batch_order(len(dataset.train_x), batch_size, step // per_epoch, seed)[step % per_epoch]
        images = dataset.train_x[rows]
        if dither:
            noise = np.random.default_rng([seed, 4, step]).uniform(0.0, DITHER, images.shape)
            images = (images + noise).astype(np.float32)
        chosen.append((images, dataset.train_y[rows].astype(np.int32)))
    return chosen


def reference_trajectory(network, seed: int, chosen: list) -> tuple:
    """(the float32 weights each step starts from, the float64 reference pass at them): the
    spec's optimizer steps the reference's own gradients, its weights rounded to float32
    at each step, so the reference and the frameworks start every step from the same numbers."""
    weights, state, starts, passes = initial_weights(network, seed), {}, [], []
    for step, (images, labels) in enumerate(chosen, start=1):
        starts.append(weights)
        passes.append(forward_backward(network, weights, images, labels))
        updated = sgd_or_adam_step(network.training.optimizer, weights, passes[-1].gradients, state, step)
        weights = [LayerWeights(w.layer_index, np.float32(w.kernel), np.float32(w.bias)) for w in updated]
    return starts, passes


def run_child(name: str, job: dict, scratch: str) -> tuple:
    """(report dict, outputs npz path or None, failure text or None) of one framework's child."""
    framework = get(name)
    job = {**job, "package": framework.package}
    paths = {key: os.path.join(scratch, f"{name}_{key}") for key in ("job.json", "report.json", "outputs.npz")}
    job.update(report=paths["report.json"], outputs=paths["outputs.npz"])
    with open(paths["job.json"], "w") as handle:
        json.dump(job, handle)
    print(f"{name}: {os.path.basename(framework.python)} -m algorithms.studies.localise_child", flush=True)
    try:
        proc = subprocess.run(
            [framework.python, "-m", "algorithms.studies.localise_child", paths["job.json"]],
            cwd=REPO_ROOT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None, None, f"no answer within {CHILD_TIMEOUT_S} s"
    if proc.returncode != 0 or not os.path.exists(paths["report.json"]):
        return None, None, f"exit {proc.returncode}: {last_line(proc.stderr, '(no message)')[:300]}"
    with open(paths["report.json"]) as handle:
        report = json.load(handle)
    return report, paths["outputs.npz"] if not job["structure_only"] else None, None


def localise(
    names: list,
    network_name: str = DEFAULT_NETWORK,
    steps: int = 1,
    batch_size: int = DEFAULT_BATCH,
    seed: int = 0,
    train_path: str = DEFAULT_TRAIN,
    faults: dict = None,
    structure_only: bool = False,
    dither: bool = True,
) -> Localisation:
    """The structural check and (unless `structure_only`) the localisation of `names`
    (registry names); `faults`: {name: "KIND:LAYER:VALUE"} (spec layer indexes), each put
    into that framework only. Raises InputError for a fault that does not fit the network.
    The function other studies call: the result's `rows()` is the table as data, its
    `first_beyond(name)` the layer where a framework's difference entered."""
    spec = get_network(network_name)
    network = spec.without_dropout()  # the reference and every framework run dropout off
    kept = [index for index, layer in enumerate(spec.layers) if not isinstance(layer, Dropout)]
    faults = faults or {}
    parsed, in_spec = {}, {}
    for name, text in faults.items():
        try:
            fault = parse_fault(text, spec)
        except ValueError as error:
            raise InputError(f"--fault {name}:{error}") from None
        if f"--fault {fault.kind}" in OPTIONAL_FLAGS and f"--fault {fault.kind}" not in support(get(name)).flags:
            having = [other for other in NAMES if f"--fault {fault.kind}" in support(get(other)).flags]
            raise InputError(f"--fault {name}:{text}: {name} does not build it; {', '.join(having)} does")
        in_spec[name] = fault  # the structural check's model is the whole spec's
        parsed[name] = replace(fault, layer=kept.index(fault.layer))  # the index in the network without dropout
    result = Localisation(spec, steps, list(names), faults=dict(faults))
    job = {"network": network_name, "steps": steps, "structure_only": structure_only}
    with tempfile.TemporaryDirectory(prefix="localise-") as scratch:
        if not structure_only:
            chosen = batches(train_path, spec, steps, batch_size, seed, dither)
            starts, passes = reference_trajectory(network, seed, chosen)
            job["inputs"] = write_inputs(os.path.join(scratch, "inputs.npz"), chosen, starts)
        for name in names:
            fault, spec_fault = parsed.get(name), in_spec.get(name)
            report, outputs, failure = run_child(
                name,
                {**job, "fault": asdict(fault) if fault else None, "spec_fault": asdict(spec_fault) if fault else None},
                scratch,
            )
            if failure:
                result.failures[name] = failure
                continue
            result.structure[name] = structural_problems(name, spec, report["parameters"])
            result.structure_layers[name] = first_structural_layer(name, spec, report["parameters"])
            if outputs:
                result.cells[name] = read_cells(outputs, network, kept, passes)
    return result


def write_inputs(path: str, chosen: list, starts: list) -> str:
    arrays = {}
    for step, ((images, labels), weights) in enumerate(zip(chosen, starts), start=1):
        arrays.update({f"images_{step}": images, f"labels_{step}": labels})
        for w in weights:
            arrays.update({f"kernel_{step}_{w.layer_index}": w.kernel, f"bias_{step}_{w.layer_index}": w.bias})
    np.savez(path, **arrays)
    return path


def read_cells(path: str, network, kept: list, passes: list) -> list:
    """One dict per step, (spec layer index, direction) -> Cell, from a child's outputs."""
    per_step = []
    with np.load(path) as saved:
        for step, reference in enumerate(passes, start=1):
            outputs = {
                index: saved[f"output_{step}_{index}"]
                for index in range(len(network.layers))
                if f"output_{step}_{index}" in saved.files
            }
            gradients = {
                (index, role): saved[f"gradient_{step}_{index}_{role}"]
                for index, _, _ in network.parametric_layers()
                for role in ("kernel", "bias")
                if f"gradient_{step}_{index}_{role}" in saved.files
            }
            cells = compare_pass(network, reference, outputs, gradients)
            per_step.append({(kept[index], direction): cell for (index, direction), cell in cells.items()})
    return per_step


def unused_prefix(folder: str) -> str:
    """<folder>/<new run id>, one no earlier run's files start with."""
    os.makedirs(folder, exist_ok=True)
    while True:
        prefix = os.path.join(folder, new_run_id())
        if not any(os.path.exists(prefix + suffix) for suffix in (".png", ".csv")):
            return prefix


def parse_args(argv: list) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog="python -m algorithms.studies.localise",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", default=",".join(NAMES), help="comma-separated frameworks (default: all)")
    parser.add_argument("--network", default=DEFAULT_NETWORK, choices=sorted(NETWORKS))
    parser.add_argument("--steps", type=int, default=1, help="steps of the reference trajectory, each compared")
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH, help="images per step")
    parser.add_argument("--seed", type=int, default=0, help="initial weights, split and batch order")
    parser.add_argument("--train", default=DEFAULT_TRAIN, help="the training CSV the batches come from")
    parser.add_argument("--structure_only", action="store_true", help="the structural check alone")
    parser.add_argument(
        "--no_dither", action="store_true", help="the batch's own pixels: ReLU's and max-pool's kinks included"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="FRAMEWORK:KIND:LAYER:VALUE",
        help="a known error in one framework: weights:LAYER:FACTOR or padding:LAYER:PIXELS (spec layer index)",
    )
    parser.add_argument("--results_dir", default=os.path.join(RESULTS_DIR, "localise"))
    args = parser.parse_args(argv)
    args.names = children.framework_names(parser, args.only, "--only")
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch_size: must be 1 or more")
    faults = {}
    for text in args.fault:
        name, _, fault = text.partition(":")
        if name not in args.names:
            parser.error(f"--fault {text}: {name!r} is not one of --only's {', '.join(args.names)}")
        faults[name] = fault
    args.faults = faults
    return args


def main(argv=None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        result = localise(
            args.names,
            args.network,
            args.steps,
            args.batch_size,
            args.seed,
            args.train,
            args.faults,
            args.structure_only,
        )
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.structure_only:
        for name in result.frameworks:
            problems = result.structure.get(name)
            failure = result.failures.get(name)
            print(
                "\n".join(problems) if problems else f"{name}: " + (f"not run: {failure}" if failure else "as the spec")
            )
        return 0 if result.healthy() else 1
    print(format_localisation(result))
    prefix = unused_prefix(args.results_dir)
    write_cells_csv(result, prefix + ".csv")
    if result.cells:
        plot_heatmap(result, prefix + ".png")
        print(f"\nheatmap: {prefix}.png  every cell: {prefix}.csv")
    return 0 if result.healthy() else 1


if __name__ == "__main__":
    sys.exit(main())
