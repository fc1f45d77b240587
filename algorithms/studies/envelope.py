"""`python -m algorithms.studies.drift --envelope` (`make drift ARGS=--envelope`): the
float32 drift envelope of the parity regime (algorithms/analysis/drift_envelope.py),
measured here and written where the baselines live.

Every framework of the main env trains in parity mode, at the main command's settings
(the network's batch, 50 steps), twice (run-to-run); torch and TensorFlow once more at
1 thread against their 2 (thread count); TensorFlow with oneDNN off and in eager mode
(its arithmetic in another order: other kernels, no fused ops). The pairs: each framework's two runs, the thread
and summation-order pairs, and every two frameworks (cross-framework). The envelope is
their largest relative loss difference per step, a running maximum; beside it, how far
above the envelope of the others each pair reaches (leave one out), the measure
ENVELOPE_FACTOR is set from. Written to results/baseline/drift/envelope_<network>.csv
(--envelope_dir elsewhere), with a header saying how and at which settings.
"""

from __future__ import annotations

import itertools
import os
import platform
from datetime import datetime, timezone

import numpy as np

from algorithms.analysis.drift_envelope import (
    ENVELOPE_FACTOR,
    build_envelope,
    envelope_path,
    leave_one_out_ratios,
    relative_difference,
    write_envelope,
)
from algorithms.analysis.settings import Settings
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.run.settings_record import read_settings
from algorithms.studies import children
from algorithms.tables import text_table

ENVELOPE_STEPS = 50
MAIN_ENV = tuple(framework.name for framework in FRAMEWORKS if framework.venv == "main")
THREAD_PAIRS = ("torch", "tensorflow")  # frameworks whose kernels split work by --threads
# the same framework with its arithmetic in another order: (variant, flags, environment).
# TensorFlow's eager ops skip graph mode's fused kernels (Grappler's conv+bias+relu); Keras
# on jax eager runs op by op, each op its own XLA computation, where its default jit-compiles
# the whole step into one that XLA fuses: XLA's fusion on against off (TensorFlow's own XLA
# is no variant: it refuses --compile with --parity, having no deterministic XLA max-pool
# gradient).
SUMMATION_ORDERS = {
    "tensorflow": (("onednn_off", [], {"TF_ENABLE_ONEDNN_OPTS": "0"}), ("eager", ["--execution", "eager"], {})),
    "keras_jax": (("eager", ["--execution", "eager"], {}),),
}


def measure_envelope(
    names: list, forwarded: list, results_dir: str, network: str, run_id: str, out_dir: str, steps: int
) -> int:
    """Runs the parity runs, writes the envelope; returns the exit status. A run this
    --run_id finished already (the command interrupted and started again) is reused."""
    runs = {}  # (name, variant) -> its run id
    for index, name in enumerate(names, start=1):
        for variant, flags, env in variants(name):
            this_run = f"{run_id}-{variant}"
            runs[name, variant] = this_run
            finished = run_losses(results_dir, network, name, this_run)
            if finished is not None and finished[0].size >= steps:
                print(f"[{index}/{len(names)} {variant}] {name}: {this_run} finished already", flush=True)
                continue
            children.run_framework(
                name,
                forwarded + flags + ["--run_id", this_run, "--quiet"],
                f"[{index}/{len(names)} {variant}] {name}",
                env=env,
            )
    losses = {key: run_losses(results_dir, network, key[0], this_run) for key, this_run in runs.items()}
    pairs = honest_pairs(losses, names)
    if not any(series for series in pairs.values()):
        print("error: no pair of runs finished; nothing measured")
        return 1
    reference = next(name for name in names if losses.get((name, "a")) is not None)
    settings = read_settings(children.results_csv(results_dir, network, reference)).get(runs[reference, "a"], {})
    ratios = leave_one_out_ratios([item for kind in pairs for item in pairs[kind]])
    envelope = build_envelope(
        {kind: [(steps, differences) for _, steps, differences in items] for kind, items in pairs.items()},
        Settings(settings),
        tuple(_notes(network, names, pairs, ratios, settings)),
    )
    path = envelope_path(out_dir, network)
    write_envelope(envelope, path)
    print(format_envelope(envelope, ratios))
    print(f"\nenvelope: {path}")
    return 0


def variants(name: str) -> list:
    """(variant, flags, environment) of each run `name` makes for the envelope."""
    found = [("a", [], {}), ("b", [], {})]
    if name in THREAD_PAIRS:
        found.append(("threads1", ["--threads", "1"], {}))
    return found + list(SUMMATION_ORDERS.get(name, ()))


def run_losses(results_dir: str, network: str, name: str, run_id: str):
    rows = [
        r for r in children.run_rows(children.results_csv(results_dir, network, name), run_id) if r["phase"] == "train"
    ]
    if not rows:
        return None
    return np.array([r["step"] for r in rows], dtype=int), np.array([r["loss"] for r in rows], dtype=np.float64)


def honest_pairs(losses: dict, names: list) -> dict:
    """kind -> [(label, steps, relative differences)] of every pair whose runs finished."""

    def pair(first, second, label):
        if losses.get(first) is None or losses.get(second) is None:
            return []
        steps, ia, ib = np.intersect1d(losses[first][0], losses[second][0], return_indices=True)
        return [(label, steps, relative_difference(losses[first][1][ia], losses[second][1][ib]))]

    kinds = {"run_to_run": [], "threads": [], "summation_order": [], "cross_framework": []}
    for name in names:
        kinds["run_to_run"] += pair((name, "a"), (name, "b"), f"{name} a vs b")
        kinds["threads"] += pair((name, "a"), (name, "threads1"), f"{name} 2 vs 1 threads")
        for variant, _, _ in SUMMATION_ORDERS.get(name, ()):
            kinds["summation_order"] += pair((name, "a"), (name, variant), f"{name} {variant}")
    for first, second in itertools.combinations(names, 2):
        kinds["cross_framework"] += pair((first, "a"), (second, "a"), f"{first} vs {second}")
    return kinds


def _notes(network: str, names: list, pairs: dict, ratios: list, settings: dict) -> list:
    worst_label, worst_ratio, worst_step = max(ratios, key=lambda item: item[1])
    counted = ", ".join(f"{kind} {len(items)}" for kind, items in pairs.items())
    steps = max(int(steps[-1]) for items in pairs.values() for _, steps, _ in items)
    return [
        f"float32 drift envelope of {network}: per step, the largest |dloss|/loss of the honest parity pairs "
        "below, as a running maximum (algorithms/analysis/drift_envelope.py)",
        f"measured {datetime.now(timezone.utc):%Y-%m-%d} on {platform.node()} ({os.cpu_count()} CPUs, "
        f"{platform.machine()}): {steps} steps at "
        f"batch {settings.get('batch')}, lr {settings.get('learning_rate')}, seed {settings.get('seed')}, "
        f"{settings.get('threads')} threads (1 in the thread pairs), --parity",
        f"frameworks: {', '.join(names)}; pairs: {counted}",
        f"leave one out: the worst honest pair ({worst_label}) reaches {worst_ratio:.3g}x the envelope of the "
        f"others (step {worst_step}); a pair is beyond drift above {ENVELOPE_FACTOR:g}x",
    ]


def format_envelope(envelope, ratios: list) -> str:
    marks = [int(s) for s in envelope.steps if s in (1, 2, 3, 5, 10, 15, 20, 30, 40, 50) or s == envelope.steps[-1]]
    index = {int(step): i for i, step in enumerate(envelope.steps)}
    header = ["step", "envelope"] + list(envelope.sources)
    body = [
        [str(step), f"{envelope.limit[index[step]]:.2e}"]
        + [f"{envelope.sources[kind][index[step]]:.2e}" for kind in envelope.sources]
        for step in marks
    ]
    lines = ["drift envelope (|dloss|/loss, largest per kind of pair):"] + text_table(header, body, indent="  ")
    lines.append("\neach honest pair against the envelope of all the others (leave one out):")
    lines += text_table(
        ["pair", "worst ratio", "at step"],
        [[label, f"{ratio:.3g}", str(step)] for label, ratio, step in sorted(ratios, key=lambda r: -r[1])],
        indent="  ",
    )
    return "\n".join(lines)
