"""Where a difference enters: every framework's layers against a float64 reference.

    python -m algorithms.localisation.localise [--only torch,caffe] [--steps 3] [--batch_size 8]
        [--network NAME] [--seed 0] [--train data/train.csv] [--structure_only]
        [--fault torch:weights:3:1.1] [--no_dither] [--results_dir results/localise]

First the structural check, which costs nothing: every framework's parameter tensors,
their shapes (in its own layout) and count against the spec; a missing bias or a
transposed kernel is named before anything runs (`--structure_only` stops there).
Then one batch of the training data (the shared batch order's first, with --seed) goes
through every framework at the shared initial weights with dropout off, each in its own
process and venv, and each layer's output and each parameter's gradient is compared with
the float64 numpy reference of the spec (algorithms/reference/reference.py). With --steps K,
steps 2..K do the same at the reference trajectory's weights (the spec's optimizer, in
float64, on the next batches), loaded afresh into every framework each step, so an
error cannot compound: each step is a fresh look at one layer stack.

Printed: a table per pass (framework x layer, the worst relative error over the steps),
the first layer beyond float32 tolerance marked, and a line per framework saying where
its difference entered, on its layer: beyond tolerance, another shape than the spec's
("layer 4 MaxPool2D 2: output shape ..., spec ..."), NaN or Inf where the reference is
finite, no gradient for a parameter the framework holds ("layer 9 Dense 128 bias: no
gradient"). A framework whose process fails or dies is compared as far as it got, and a
line names the last layer it reported, its exit status and its error's last line (its
whole stderr in <id>.<framework>.log); a traceback never reaches the table.
Written under --results_dir: <id>.png (the heatmap) and <id>.csv (every cell), never over
an earlier run's. --fault FRAMEWORK:KIND:LAYER[:VALUE] puts a known error into one
framework (algorithms/network/variants.py: weights, padding, bias, frozen, shape, die), to
see it found.
Exit status: 0 when every framework is within tolerance everywhere, 1 for any finding (a
framework that failed included), 2 for a bad flag.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, replace
from typing import Optional

import numpy as np

from algorithms.localisation.localisation import Localisation, Stop, compare_pass
from algorithms.localisation.localisation_report import format_localisation, plot_heatmap, write_cells_csv
from algorithms.localisation.structure import first_structural_layer, structural_problems
from algorithms.errors import EXIT_FAILED, EXIT_INPUT_ERROR, InputError
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN, REPO_ROOT, RESULTS_DIR
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.config.run_config import OPTIONAL_FLAGS
from algorithms.config.parser import OneLineErrorParser
from algorithms.session.run_session import new_run_id
from algorithms.dataset.data import batch_order, ensure_default_data, load_dataset, steps_per_epoch
from algorithms.network.networks import DEFAULT_NETWORK, NETWORKS, Dropout, network_for_data
from algorithms.reference.reference import forward_backward, sgd_or_adam_step, update_running
from algorithms.network.variants import parse_fault
from algorithms.network.weights import LayerWeights, initial_weights
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
    split = network.training.validation_split
    dataset = load_dataset(train_path, None, None, split, seed, network.input_shape, network.num_classes)
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
    at each step, so the reference and the frameworks start every step from the same numbers
    (a BatchNormalization's running statistics too, moved by each step's batch)."""
    weights, state, starts, passes = initial_weights(network, seed), {}, [], []
    for step, (images, labels) in enumerate(chosen, start=1):
        starts.append(weights)
        passes.append(forward_backward(network, weights, images, labels))
        updated = sgd_or_adam_step(network.training.optimizer, weights, passes[-1].gradients, state, step)
        updated = update_running(network, updated, passes[-1].statistics)
        weights = [
            LayerWeights(
                w.layer_index,
                np.float32(w.kernel),
                np.float32(w.bias),
                *(None if value is None else np.float32(value) for value in (w.running_mean, w.running_var)),
            )
            for w in updated
        ]
    return starts, passes


@dataclass
class ChildRun:
    """One framework's child process: its exit status (None: killed at the timeout), its
    stderr, its report (None: it wrote none) and the folder its arrays are in."""

    status: Optional[int]
    stderr: str
    report: Optional[dict]
    outputs: str


def run_child(name: str, job: dict, scratch: str, python: Optional[str] = None, tag: str = "") -> ChildRun:
    """Framework `name`'s child on `job`, in its own venv or `python`'s (another release's
    environment: registry/release_env.py), its files in `scratch` under `name` and `tag`."""
    framework = get(name)
    shown = python or os.path.basename(framework.python)
    python = python or framework.python
    job = {**job, "package": framework.package}
    paths = {key: os.path.join(scratch, f"{name}{tag}_{key}") for key in ("job.json", "report.json", "outputs")}
    job.update(report=paths["report.json"], outputs=paths["outputs"])
    with open(paths["job.json"], "w") as handle:
        json.dump(job, handle)
    print(f"{name}{tag}: {shown} -m algorithms.localisation.localise_child", flush=True)
    try:
        proc = subprocess.run(
            [python, "-m", "algorithms.localisation.localise_child", paths["job.json"]],
            cwd=REPO_ROOT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
            capture_output=True,
            text=True,
            timeout=CHILD_TIMEOUT_S,
        )
        status, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as expired:  # what it wrote before is still read
        status, stderr = None, expired.stderr or ""
        stderr = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    return ChildRun(status, stderr, read_json(paths["report.json"]), paths["outputs"])


def read_json(path: str) -> Optional[dict]:
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read_array(folder: str, name: str) -> Optional[np.ndarray]:
    """An array the child wrote; None if it wrote none (or none numpy can read)."""
    try:
        return np.load(os.path.join(folder, name + ".npy"), allow_pickle=False)
    except (OSError, ValueError):
        return None


def read_child(child: ChildRun, network, kept: list, passes: list) -> tuple:
    """(one dict per step the child reached: (spec layer index, direction) -> Cell; a Stop
    where it ended before its last step was done, else None). A step it stopped in is
    compared as far as it got: the arrays it wrote before are judged, the rest are cells
    of their own (not reached)."""
    per_step = []
    for step, reference in enumerate(passes, start=1):
        record, outputs, gradients, input_gradients, evaluation = read_step(child.outputs, network, step)
        complete = bool(record.get("complete"))
        if outputs or gradients or record:
            cells = compare_pass(network, reference, outputs, gradients, complete, input_gradients, evaluation)
            per_step.append({(kept[index], direction): cell for (index, direction), cell in cells.items()})
        if not complete:
            last_output = kept[max(outputs)] if outputs else None
            return per_step, Stop(step, last_output, stop_reason(child, record.get("error")), child.stderr)
    if child.status != 0:  # every step done, then a failure
        return per_step, Stop(None, None, stop_reason(child, None), child.stderr)
    return per_step, None


def read_step(folder: str, network, step: int) -> tuple:
    """What a child wrote of one step, in the network's (dropout-less) layer indexes: (its
    step record, outputs, gradients (None: the framework computed none), input gradients,
    evaluation outputs)."""
    record = read_json(os.path.join(folder, f"step_{step}.json")) or {}
    outputs = {}
    for index in range(len(network.layers)):
        array = read_array(folder, f"output_{step}_{index}")
        if array is not None:
            outputs[index] = array
    gradients = {}
    for index, _, _ in network.parametric_layers():
        for role in ("kernel", "bias"):
            array = read_array(folder, f"gradient_{step}_{index}_{role}")
            if array is not None:
                gradients[(index, role)] = array
    gradients.update({(index, role): None for index, role in record.get("no_gradient", [])})
    input_gradients, evaluation = {}, {}
    for index in range(len(network.layers)):
        for name, found in (("input_gradient", input_gradients), ("evaluation", evaluation)):
            array = read_array(folder, f"{name}_{step}_{index}")
            if array is not None:
                found[index] = array
    return record, outputs, gradients, input_gradients, evaluation


def stop_reason(child: ChildRun, error: Optional[str]) -> str:
    """One line: the exit status and the error the child caught, or its stderr's last line."""
    if child.status is None:
        return f"no answer within {CHILD_TIMEOUT_S} s: {last_line(child.stderr, '(no message)')[:300]}"
    return f"exit {child.status}: {(error or last_line(child.stderr, '(no message)'))[:300]}"


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
    spec = network_for_data(network_name, train_path)
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
    job = {"network": network_name, "train": train_path, "steps": steps, "structure_only": structure_only}
    with tempfile.TemporaryDirectory(prefix="localise-") as scratch:
        if not structure_only:
            chosen = batches(train_path, spec, steps, batch_size, seed, dither)
            starts, passes = reference_trajectory(network, seed, chosen)
            job["inputs"] = write_inputs(os.path.join(scratch, "inputs.npz"), chosen, starts)
        for name in names:
            fault, spec_fault = parsed.get(name), in_spec.get(name)
            child = run_child(
                name,
                {
                    **job,
                    "fault": asdict(fault) if fault else None,
                    "spec_fault": asdict(spec_fault) if fault else None,
                    "fault_text": faults.get(name, ""),
                },
                scratch,
            )
            report = child.report or {}
            if "parameters" in report:
                result.structure[name] = structural_problems(name, spec, report["parameters"])
                result.structure_layers[name] = first_structural_layer(name, spec, report["parameters"])
            elif "parameters_error" in report:
                result.structure[name] = [f"{name}: model_parameters failed: {report['parameters_error'][:300]}"]
            if structure_only:
                if child.status != 0:
                    result.failures[name] = Stop(1, None, stop_reason(child, None), child.stderr)
                continue
            cells, stop = read_child(child, network, kept, passes)
            if cells:
                result.cells[name] = cells
            if stop:
                result.failures[name] = stop
    return result


def write_inputs(path: str, chosen: list, starts: list) -> str:
    arrays = {}
    for step, ((images, labels), weights) in enumerate(zip(chosen, starts), start=1):
        arrays.update({f"images_{step}": images, f"labels_{step}": labels})
        for w in weights:
            arrays.update({f"kernel_{step}_{w.layer_index}": w.kernel, f"bias_{step}_{w.layer_index}": w.bias})
            if w.running_mean is not None:
                arrays[f"running_mean_{step}_{w.layer_index}"] = w.running_mean
                arrays[f"running_var_{step}_{w.layer_index}"] = w.running_var
    np.savez(path, **arrays)
    return path


def unused_prefix(folder: str) -> str:
    """<folder>/<new run id>, one no earlier run's files start with."""
    os.makedirs(folder, exist_ok=True)
    while True:
        prefix = os.path.join(folder, new_run_id())
        if not any(os.path.exists(prefix + suffix) for suffix in (".png", ".csv")):
            return prefix


def parse_args(argv: list) -> argparse.Namespace:
    parser = OneLineErrorParser(
        prog="python -m algorithms.localisation.localise",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--only", default=",".join(NAMES), help="comma-separated frameworks (default: all)")
    parser.add_argument(
        "--network",
        default=DEFAULT_NETWORK,
        help=f"a built-in network ({', '.join(sorted(NETWORKS))}), a network file (.toml) or an ONNX model",
    )
    parser.add_argument("--steps", type=int, default=1, help="steps of the reference trajectory, each compared")
    parser.add_argument("--batch_size", type=int, default=DEFAULT_BATCH, help="images per step")
    parser.add_argument("--seed", type=int, default=0, help="initial weights, split and batch order")
    parser.add_argument(
        "--train", default=DEFAULT_TRAIN, help="the training data the batches come from (a CSV, an .npz, a folder)"
    )
    parser.add_argument("--structure_only", action="store_true", help="the structural check alone")
    parser.add_argument(
        "--no_dither", action="store_true", help="the batch's own pixels: ReLU's and max-pool's kinks included"
    )
    parser.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="FRAMEWORK:KIND:LAYER[:VALUE]",
        help="a known error in one framework (spec layer index): weights:LAYER:FACTOR (nan: NaN weights, 1e39: Inf), "
        "padding:LAYER:PIXELS, bias:LAYER, frozen:LAYER (the bias gets no gradient), shape:LAYER (a max-pool "
        "padded by one pixel), die:LAYER (the process ends after that layer's output)",
    )
    parser.add_argument("--results_dir", default=os.path.join(RESULTS_DIR, "localise"))
    args = parser.parse_args(argv)
    args.names = framework_names(parser, args.only, "--only")
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
                "\n".join(problems)
                if problems
                else f"{name}: " + (f"not run: {failure.reason}" if failure else "as the spec")
            )
        return 0 if result.healthy() else EXIT_FAILED
    print(format_localisation(result))
    prefix = unused_prefix(args.results_dir)
    write_cells_csv(result, prefix + ".csv")
    for name, stop in result.failures.items():  # the traceback a stopped framework printed, kept whole
        with open(f"{prefix}.{name}.log", "w") as handle:
            handle.write(stop.log)
        print(f"{name}'s stderr: {prefix}.{name}.log")
    if result.cells:
        plot_heatmap(result, prefix + ".png")
        print(f"\nheatmap: {prefix}.png  every cell: {prefix}.csv")
    return 0 if result.healthy() else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
