"""`python -m algorithms.studies.drift --envelope` (`make envelope`): the float32 drift
envelopes of the same-seed regime (algorithms/analysis/drift_envelope.py), one per mode
(`default`: dropout on, its uniforms shared; `parity`: --parity), measured here and
written where the baselines live.

In each mode every framework trains at the main command's settings (the
network's batch, 50 steps), twice (run-to-run); torch and TensorFlow once more at 1
thread against their 2 (thread count); TensorFlow with oneDNN off and in eager mode, and
Keras on jax eager (their arithmetic in another order: other kernels, no fused ops). The
pairs: each framework's two runs, the thread and summation-order pairs, and every two
frameworks (cross-framework). The envelope is their largest relative loss difference per
step from the init row (step 0) on, a running maximum, and beside it their largest
accuracy difference; then how far above the envelope of the others each pair reaches
(leave one out), the measure ENVELOPE_FACTOR is set from. Written to
results/baseline/drift/envelope_<network>_<mode>.csv (--envelope_dir elsewhere; measured
with --device gpu on a GPU: envelope_<network>_<mode>_gpu.csv, which only GPU runs are
judged against), with a header saying how and at which settings.
"""

from __future__ import annotations

import itertools
import os
import platform
from datetime import datetime, timezone

import numpy as np

from algorithms.analysis.drift_envelope import (
    ENVELOPE_FACTOR,
    MODES,
    build_envelope,
    envelope_path,
    leave_one_out_ratios,
    relative_difference,
    write_envelope,
)
from algorithms.analysis.settings import Settings
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.records import CHECK_FOLDER, read_settings
from algorithms.studies import children
from algorithms.tables import text_table

ENVELOPE_STEPS = 50
EVERY = tuple(framework.name for framework in FRAMEWORKS)  # the envelope's frameworks: every one
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


def measure_envelopes(
    names: list, forwarded: list, results_dir: str, network: str, run_id: str, out_dir: str, steps: int, modes=MODES
) -> int:
    """Each mode's envelope (see the module docstring); returns the exit status."""
    for mode in modes:
        print(f"\n{mode}: " + ("--parity" if mode == "parity" else "dropout on, its uniforms shared"), flush=True)
        flags = forwarded + ["--epoch_check"] + (["--parity"] if mode == "parity" else [])
        status = measure_envelope(names, flags, results_dir, network, f"{run_id}-{mode}", out_dir, steps, mode)
        if status:
            return status
    return 0


def measure_envelope(
    names: list, forwarded: list, results_dir: str, network: str, run_id: str, out_dir: str, steps: int, mode: str
) -> int:
    """Runs one mode's runs, writes its envelope; returns the exit status. A run this
    --run_id finished already (the command interrupted and started again) is reused."""
    runs = {}  # (name, variant) -> its run id
    for index, name in enumerate(names, start=1):
        for variant, flags, env in variants(name):
            this_run = f"{run_id}-{variant}"
            runs[name, variant] = this_run
            finished = run_series(results_dir, network, name, this_run)
            if finished is not None and finished[0][-1] >= steps:
                print(f"[{index}/{len(names)} {variant}] {name}: {this_run} finished already", flush=True)
                continue
            children.run_framework(
                name,
                forwarded + flags + ["--run_id", this_run, "--quiet"],
                f"[{index}/{len(names)} {variant}] {name}",
                env=env,
            )
    for part, folder in (("", results_dir), ("_check", os.path.join(results_dir, CHECK_FOLDER))):
        series = {key: run_series(folder, network, key[0], this_run) for key, this_run in runs.items()}
        pairs = honest_pairs(series, names)
        if not any(items for items in pairs.values()):
            print(f"error: no pair of runs{' (epoch checks)' if part else ''} finished; nothing measured")
            return 1
        reference = next(name for name in names if series.get((name, "a")) is not None)
        settings = read_settings(children.results_csv(folder, network, reference)).get(runs[reference, "a"], {})
        ratios = leave_one_out_ratios([(label, steps, loss) for kind in pairs for label, steps, loss, _ in pairs[kind]])
        envelope = build_envelope(
            {kind: [(steps, loss) for _, steps, loss, _ in items] for kind, items in pairs.items()},
            Settings(settings),
            tuple(_notes(network, names, pairs, ratios, settings, mode + part)),
            [(steps, accuracy) for items in pairs.values() for _, steps, _, accuracy in items],
        )
        on_gpu = "_gpu" if settings.get("device") == "gpu" else ""  # a GPU's envelope never replaces the CPU's
        path = envelope_path(out_dir, network, mode + on_gpu + part)
        write_envelope(envelope, path)
        print(("\nthe epoch checks' " if part else "") + format_envelope(envelope, ratios))
        print(f"\nenvelope: {path}")
    return 0


def variants(name: str) -> list:
    """(variant, flags, environment) of each run `name` makes for the envelope."""
    found = [("a", [], {}), ("b", [], {})]
    if name in THREAD_PAIRS:
        found.append(("threads1", ["--threads", "1"], {}))
    return found + list(SUMMATION_ORDERS.get(name, ()))


def run_series(results_dir: str, network: str, name: str, run_id: str):
    """(steps, losses, accuracies) of a run's init row (step 0) and train rows, or None."""
    rows = [
        r
        for r in children.run_rows(children.results_csv(results_dir, network, name), run_id)
        if r["phase"] in ("init", "train")
    ]
    if not any(r["phase"] == "train" for r in rows):
        return None
    return (
        np.array([r["step"] for r in rows], dtype=int),
        np.array([r["loss"] for r in rows], dtype=np.float64),
        np.array([r["accuracy"] for r in rows], dtype=np.float64),
    )


def honest_pairs(series: dict, names: list) -> dict:
    """kind -> [(label, steps, relative loss differences, |accuracy differences|)] of every
    pair whose runs finished."""

    def pair(first, second, label):
        if series.get(first) is None or series.get(second) is None:
            return []
        (steps_a, loss_a, accuracy_a), (steps_b, loss_b, accuracy_b) = series[first], series[second]
        steps, ia, ib = np.intersect1d(steps_a, steps_b, return_indices=True)
        return [(label, steps, relative_difference(loss_a[ia], loss_b[ib]), np.abs(accuracy_a[ia] - accuracy_b[ib]))]

    kinds = {"run_to_run": [], "threads": [], "summation_order": [], "cross_framework": []}
    for name in names:
        kinds["run_to_run"] += pair((name, "a"), (name, "b"), f"{name} a vs b")
        kinds["threads"] += pair((name, "a"), (name, "threads1"), f"{name} 2 vs 1 threads")
        for variant, _, _ in SUMMATION_ORDERS.get(name, ()):
            kinds["summation_order"] += pair((name, "a"), (name, variant), f"{name} {variant}")
    for first, second in itertools.combinations(names, 2):
        kinds["cross_framework"] += pair((first, "a"), (second, "a"), f"{first} vs {second}")
    return kinds


def _notes(network: str, names: list, pairs: dict, ratios: list, settings: dict, mode: str) -> list:
    worst_label, worst_ratio, worst_step = max(ratios, key=lambda item: item[1])
    counted = ", ".join(f"{kind} {len(items)}" for kind, items in pairs.items())
    steps = max(int(steps[-1]) for items in pairs.values() for _, steps, _, _ in items)
    how = "--parity" if mode.startswith("parity") else "dropout on, its uniforms shared (network/dropout.py)"
    return [
        f"float32 drift envelope of {network}, mode {mode} ({how}): per step from the init row (step 0), the "
        "largest |dloss|/loss of the honest pairs below, as a running maximum, and the largest |accuracy "
        "difference| (algorithms/analysis/drift_envelope.py)",
        f"measured {datetime.now(timezone.utc):%Y-%m-%d} on {platform.node()} ({os.cpu_count()} CPUs, "
        f"{platform.machine()}): {steps} steps at "
        f"batch {settings.get('batch')}, lr {settings.get('learning_rate')}, seed {settings.get('seed')}, "
        f"{settings.get('threads')} threads (1 in the thread pairs), {how}, on the "
        f"{settings.get('device', 'cpu')}: {settings.get('device_detail', 'cpu')}",
        f"frameworks: {', '.join(names)}; pairs: {counted}",
        f"leave one out: the worst honest pair ({worst_label}) reaches {worst_ratio:.3g}x the envelope of the "
        f"others (step {worst_step}); a pair is beyond drift above {ENVELOPE_FACTOR:g}x",
    ]


def format_envelope(envelope, ratios: list) -> str:
    shown = (0, 1, 2, 3, 5, 10, 15, 20, 30, 40, 50)
    marks = [int(s) for s in envelope.steps if s in shown or s == envelope.steps[-1] or s == envelope.horizon()]
    index = {int(step): i for i, step in enumerate(envelope.steps)}
    header = ["step", "envelope", "accuracy"] + list(envelope.sources)
    body = [
        [str(step) + (" (horizon)" if step == envelope.horizon() else ""), f"{envelope.limit[index[step]]:.2e}"]
        + [f"{envelope.accuracy_at(np.array([step]))[0]:.3g}"]
        + [f"{envelope.sources[kind][index[step]]:.2e}" for kind in envelope.sources]
        for step in marks
    ]
    lines = ["drift envelope (|dloss|/loss, largest per kind of pair; accuracy: the largest |accuracy difference|):"]
    lines += text_table(header, body, indent="  ")
    lines.append("\neach honest pair against the envelope of all the others (leave one out):")
    lines += text_table(
        ["pair", "worst ratio", "at step"],
        [[label, f"{ratio:.3g}", str(step)] for label, ratio, step in sorted(ratios, key=lambda r: -r[1])],
        indent="  ",
    )
    return "\n".join(lines)
