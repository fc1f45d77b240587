"""The memory check's estimate against what runs really take: each framework's entry script
trains a few steps of each case below while its peak resident memory (VmHWM, footprint.py)
is read from /proc, beside the estimate the check makes before anything starts
(Footprint.one_process_mb: the framework's measured footprint, the data, the network's
weights and activations, network_memory.py). The default net's two batches are what a
Footprint's `process_mb` and `sample_mb` are fitted from (the line through them);
the example networks' rows are the estimate's test.

    python scripts/example_data.py          # the examples' data, once
    python -m algorithms.bench.memory_estimate [--only torch,caffe] [--steps 3]

prints one line per framework and case: the estimate, the peak and their ratio, then the
line's fit for each framework (docs/own-network.md#memory-before-it-starts has the figures).
"""

from __future__ import annotations

import argparse
import os
import sys

from algorithms.bench.footprint import measure
from algorithms.machine.network_memory import network_memory
from algorithms.machine.resources import dataset_mb
from algorithms.paths import DEFAULT_DATA_DIR, DEFAULT_TRAIN, REPO_ROOT
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import NAMES, framework_names, get
from algorithms.run.entry import prepare

EXAMPLES = os.path.join(REPO_ROOT, "examples")
# (label, network, training data, batch)
CASES = (
    ("default net, batch 100", "cnn2d_3layer_fullconnected_3layer", DEFAULT_TRAIN, 100),
    ("default net, batch 1000", "cnn2d_3layer_fullconnected_3layer", DEFAULT_TRAIN, 1000),
    ("digits_8x8, its batch 32", "digits_8x8.toml", "digits_8x8_train.npz", 32),
    ("digits_8x8, batch 1000", "digits_8x8.toml", "digits_8x8_train.npz", 1000),
    ("bn_32x32x3, its batch 64", "bn_32x32x3.toml", "colour_digits_train.npz", 64),
    ("bn_32x32x3, batch 1000", "bn_32x32x3.toml", "colour_digits_train.npz", 1000),
)


def case_flags(network: str, train: str, batch: int, steps: int) -> list:
    if network.endswith(".toml"):
        network, train = os.path.join(EXAMPLES, network), os.path.join(DEFAULT_DATA_DIR, train)
    return ["--network", network, "--train", train, "--test", "none", "--batch_size", str(batch)] + [
        "--max_steps",
        str(steps),
        "--quiet",
    ]


def estimate_mb(name: str, flags: list) -> tuple:
    """(the check's estimate MB for one process of `name` training as `flags` say, the data MB)."""
    config, dataset = prepare(flags, get(name).script, "")
    footprint, data_mb = support(get(name)).footprint, dataset_mb(dataset)
    memory = network_memory(config.network, config.optimizer)
    return footprint.one_process_mb(data_mb, config.batch_size, memory), data_mb


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algorithms.bench.memory_estimate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--only", default=",".join(NAMES), help="frameworks, comma-separated (default: all)")
    parser.add_argument("--steps", type=int, default=3, help="training steps of each run (default: 3)")
    parser.add_argument("--results_dir", default="/tmp/memory_estimate", help="where the runs write their rows")
    args = parser.parse_args(argv)
    names = framework_names(parser, args.only, "--only")
    print(f"{'framework':<17} {'case':<26} {'estimate':>9} {'peak':>9} {'peak/est':>8}", flush=True)
    for name in names:
        framework = get(name)
        peaks = {}
        for label, network, train, batch in CASES:
            flags = case_flags(network, train, batch, args.steps)
            estimate, data_mb = estimate_mb(name, flags)
            flags += ["--results_dir", args.results_dir, "--results_log", os.path.join(args.results_dir, "log")]
            command = [sys.executable, os.path.join(REPO_ROOT, framework.script), *flags]
            processes, _, status = measure(command, {**os.environ, **framework.env}, quiet=True)
            peak = max(peak_mb for peak_mb, _ in processes.values()) if processes else 0.0
            peaks[label] = (peak, data_mb)
            result = f"{peak:9,.0f} {peak / estimate:8.2f}" if status == 0 else f"  failed (exit {status})"
            print(f"{name:<17} {label:<26} {estimate:9,.0f} {result}", flush=True)
        (peak_100, data_mb), (peak_1000, _) = peaks[CASES[0][0]], peaks[CASES[1][0]]
        sample_mb = (peak_1000 - peak_100) / 900
        print(
            f"{name:<17} fit: process_mb {peak_100 - data_mb - 100 * sample_mb:,.0f}, sample_mb {sample_mb:.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
