"""A run's own drift yardstick, where no shipped envelope covers its settings (another
network, data file, batch, optimizer, precision or strategy): measured once per settings
by a TWIN, and kept for every later run at those settings, of any framework.

Two same-seed runs of two frameworks differ by the order of their float32 arithmetic,
amplified step by step by training; how fast that grows is the network's, the data's and
the settings', not the framework's. So the first run at some settings measures it on
itself: before the run, in its own process (after the epoch check), the same framework
trains the same settings for TWIN_STEPS steps from initial weights and training images
moved by a relative size (a seeded sign per layer and per pixel): at least one float32
step, and CALIBRATION times as far as float32 arithmetic of this network moves the first
batch's loss (measured in float32 and float64 numpy, reference/reference.py), since two
frameworks differ by that much whatever else they share. Once the run has passed those
steps, |twin - run| per step, its running maximum, is written as an envelope (the shipped
envelopes' format: analysis/drift_envelope.py) to <results_dir>/yardstick/<settings
key>/envelope.csv, and the epoch check's to envelope_check.csv; the compare judges any
same-seed pair at those settings against it, with the same factor and horizon as a shipped
one (docs/comparing.md#a-yardstick-of-the-runs-own, where its false-alarm rate is measured).
The key is a hash of the settings record without the seed, the drift sources and where a
run stops (session/settings_record.yardstick_key), so a later run at the same settings, of
this framework or another, pays nothing.

`--yardstick auto` (the default) measures where neither a shipped envelope nor an earlier
run's covers the run; `measure` always; `off` never. Every process of a multi-process run
sees the same files when it decides (the twin's are published only once it has trained,
and it cannot train without them all), so all run the twin or none does.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, replace
from typing import Optional

import numpy as np

from algorithms.paths import BASELINE_DIR
from algorithms.records import (
    CHECK_FOLDER,
    check_csv,
    envelope_path,
    envelope_settings,
    mode_of,
    read_rows,
    results_csv_name,
    run_ids,
    yardstick_envelope,
    yardstick_folder,
)
from algorithms.session.recorder import write_envelope_file
from algorithms.session.settings_record import (
    SEED,
    SPLITS,
    STOPS,
    THREADS_AND_KERNELS,
    device_settings,
    settings_of,
    synchronous,
    yardstick_key,
)
from algorithms.dataset.data import Dataset

TWIN_STEPS = 40  # past the horizon of every shipped envelope (13-16): where honest runs part
PERTURBATION = 2.0**-22  # relative: about one float32 step of each initial kernel value and pixel
CALIBRATION = 4.0  # the twin starts at least this many times as far apart as float32 rounding puts two runs
LARGEST_PERTURBATION = 2.0**-10
ASYNCHRONOUS = ("ps", "async")
# what --yardstick resolves to: measured now, reused from an earlier run, covered by a shipped
# envelope, or not made (--yardstick off, or a strategy with no same-seed verdict)
RESOLVED = ("measure", "reuse", "shipped", "off")


def covering_envelope(settings: dict, network: str, baseline_dir: str = BASELINE_DIR) -> Optional[str]:
    """The shipped envelope that covers a run's settings (all but the seed, the drift
    sources, where it stops and how a synchronous step is split equal to the envelope's), or None."""
    path = envelope_path(baseline_dir, network, mode_of(settings))
    held = envelope_settings(path)
    if held is None:
        return None
    ignored = set(SEED + THREADS_AND_KERNELS + STOPS + (SPLITS if synchronous(settings) else ()))
    held = {"fault": None, "device": "cpu", **held}
    for name, value in settings.items():
        if name not in ignored and name in held and held[name] != value:
            return None
    return path


def run_settings(config, device) -> dict:
    return {**settings_of(config), **device_settings(device)}


def csv_path_of(config, framework: str, backend: str) -> str:
    return os.path.join(config.results_dir, results_csv_name(config.network.name, framework, backend))


def resolve(config, settings: dict, steps: int = TWIN_STEPS) -> str:
    """`--yardstick auto` made definite for this run (RESOLVED); `steps`: the twin's for this
    run (twin_steps): one kept by an earlier, shorter run does not cover it and is measured again."""
    if config.yardstick in ("measure", "off"):
        return config.yardstick
    if config.strategy in ASYNCHRONOUS or config.part != "run":
        return "off"
    if covering_envelope(settings, config.network.name):
        return "shipped"
    key = yardstick_key(settings)
    needed = [yardstick_envelope(config.results_dir, key)]
    if config.epoch_check:
        needed.append(yardstick_envelope(config.results_dir, key, check=True))
    held = all(os.path.isfile(path) for path in needed) and _envelope_steps(needed[0]) >= steps
    return "reuse" if held else "measure"


def _envelope_steps(path: str) -> int:
    """The last step a kept envelope covers (its last row's first field)."""
    with open(path) as handle:
        last = handle.read().rstrip().rsplit("\n", 1)[-1]
    try:
        return int(last.split(",", 1)[0])
    except ValueError:  # no row yet
        return 0


def perturbed_network(network, size: float):
    """Every conv and dense layer's initial kernel value times 1 +- `size`, a seeded sign per
    value (Network.init_perturbation: a uniform scale per layer would cancel through a
    batch normalisation, and through layers of opposite signs in a ReLU network)."""
    return replace(network, init_perturbation=size)


def perturbed(config, dataset: Dataset, size: float = PERTURBATION) -> tuple:
    """(config, dataset) of the twin: the kernels moved (perturbed_network) and every
    training pixel scaled by 1 +- `size` (a seeded sign per pixel)."""
    rng = np.random.default_rng([config.seed, 0x7717])
    signs = rng.integers(0, 2, size=dataset.train_x.shape).astype(np.float32) * 2 - 1
    train_x = (dataset.train_x * (np.float32(1.0) + np.float32(size) * signs)).astype(np.float32)
    return replace(config, network=perturbed_network(config.network, size)), replace(dataset, train_x=train_x)


def perturbation_size(config, dataset: Dataset) -> float:
    """How far the twin starts from the run: PERTURBATION, or more where float32 arithmetic of
    this network moves the first batch's loss further than that moves it (a batch
    normalisation's float32 statistics do), so that the twin starts CALIBRATION times as far
    apart as float32 rounding puts two implementations of the spec: measured in float32 and
    float64 numpy on the first batch at the initial weights (reference/reference.py)."""
    from algorithms.dataset.data import batch_order
    from algorithms.network.dropout import uniforms
    from algorithms.reference.reference import cross_entropy, training_forward
    from algorithms.network.weights import initial_weights

    network = config.reference_network or config.network
    rows = batch_order(len(dataset.train_x), config.effective_batch_at(0), 0, config.seed)[0]
    images, labels = dataset.train_x[rows], dataset.train_y[rows]
    drops = uniforms(network, config.seed, 0, rows)

    def loss(weights, dtype=np.float64, images=images):  # the forward pass alone: its loss is the whole pass's
        return cross_entropy(training_forward(network, weights, images, drops, dtype)[0], np.asarray(labels))[0]

    weights = initial_weights(network, config.seed)
    exact = loss(weights)
    rounding = abs(loss(weights, np.float32) - exact)
    moved_images = (images * (np.float32(1.0) + np.float32(PERTURBATION))).astype(np.float32)
    moved_weights = initial_weights(perturbed_network(network, PERTURBATION), config.seed)
    moved = abs(loss(moved_weights, images=moved_images) - exact)
    return min(LARGEST_PERTURBATION, PERTURBATION * max(1.0, CALIBRATION * rounding / max(moved, 1e-300)))


def twin_config(config, folder: str, steps: Optional[int], size: float = PERTURBATION):
    """The twin's config: the run's settings for its first `steps` steps (None: all of an
    epoch check's), its rows in `folder`, quiet, no check or twin of its own."""
    within = config.part + "; " if config.part != "run" else ""  # a twin of an epoch check names it
    return config.side_run(folder, within + f"yardstick twin: kernels and pixels moved by {size:.3g}", max_steps=steps)


def twin_steps(config, dataset: Dataset) -> int:
    """TWIN_STEPS, or fewer where the run takes fewer: a twin past the run's last step has
    no step of the run to be measured against."""
    planned = sum(config.epoch_steps(len(dataset.train_x)))
    return min(TWIN_STEPS, planned, config.max_steps or planned)


def note(resolved: str, config, settings: dict, seconds: Optional[float] = None, steps: int = TWIN_STEPS) -> str:
    """The run's one line on its yardstick (console and results.log): what it is and what it cost."""
    where = _shown(yardstick_folder(config.results_dir, yardstick_key(settings)))
    if resolved == "shipped":
        return f"the shipped envelope {_shown(covering_envelope(settings, config.network.name))} covers these settings"
    if resolved == "reuse":
        return f"measured at these settings by an earlier run, reused from {where} (0 s)"
    if resolved == "measure":
        cost = f"{seconds:.1f} s" if seconds is not None else "its cost not measured"
        check = " and of its epoch check" if config.epoch_check else ""
        return f"measured here: a twin of the first {steps} steps{check} ({cost}), kept in {where}"
    if config.strategy in ASYNCHRONOUS:
        return f"none: --strategy {config.strategy} has no same-seed verdict"
    return "none (--yardstick off)"


def _shown(path: str) -> str:
    """A path as a person reads it: relative to the working folder when it lies under it."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


@dataclass
class Twin:
    """A twin measured for a run: where its rows are, published, and how far it started."""

    folder: str  # <results_dir>/yardstick/<key>/
    size: float
    settings: dict
    seconds: float


def measure(
    train, config, dataset: Dataset, settings: dict, csv_path: str, check_run, session_of, records: bool
) -> Twin:
    """Trains the twin (and, with --epoch_check, the epoch check's twin) through the
    wrapper's `train(session)`, `session_of(config, dataset)` making each one's RunSession and
    `check_run(config, dataset)` the epoch check's config and data; the recording process
    moves their rows into <key>/twin/ and writes the epoch check's envelope at once (the
    check ran before); the run's own comes once the run has passed the twin's steps (finish)."""
    start = time.perf_counter()
    folder = yardstick_folder(config.results_dir, yardstick_key(settings))
    scratch = os.path.join(folder, f".measuring-{os.getpid()}")
    size = perturbation_size(config, dataset)
    try:
        twin, twin_data = perturbed(twin_config(config, scratch, twin_steps(config, dataset), size), dataset, size)
        train(session_of(twin, twin_data))
        if config.epoch_check:
            check, check_data = check_run(config, dataset)
            check_twin, check_twin_data = perturbed(
                twin_config(check, os.path.join(scratch, CHECK_FOLDER), None, size), check_data, size
            )
            train(session_of(check_twin, check_twin_data))
    except BaseException:  # no half twin left behind, nor the folders made for it
        discard(scratch, folder, config.results_dir)
        raise
    measured = Twin(folder, size, settings, time.perf_counter() - start)
    if records:
        publish(scratch, os.path.join(folder, "twin"))
        if config.epoch_check:
            run_check = check_csv(csv_path)
            write_yardstick(measured, run_check, _twin_csv(folder, csv_path, check=True), config, check=True)
    return measured


def finish(measured: Optional[Twin], config, csv_path: str, run_id: str) -> None:
    """After the run (its recording process): the envelope of |twin - run| written, where
    this run measured a twin and has its rows."""
    if measured is None:
        return
    write_yardstick(measured, (csv_path, run_id), _twin_csv(measured.folder, csv_path), config, check=False)


def write_yardstick(measured: Twin, run, twin_path: str, config, check: bool) -> None:
    """|twin - run| per step (the init row as step 0), as a running maximum, with the
    accuracy's, written as the envelope of these settings. `run`: the run's CSV path, or
    (path, run id); the twin's latest run in `twin_path`."""
    path, run_id = run if isinstance(run, tuple) else (run, None)
    if not os.path.isfile(path) or not os.path.isfile(twin_path):
        return
    ids = run_ids(path)
    run_id = run_id or (ids[-1] if ids else None)
    twin_ids = run_ids(twin_path)
    if run_id not in ids or not twin_ids:
        return
    steps, losses, accuracies = _series(read_rows(path, run_id))
    twin_steps_, twin_losses, twin_accuracies = _series(read_rows(twin_path, twin_ids[-1]))
    common, mine, theirs = np.intersect1d(steps, twin_steps_, return_indices=True)
    if not common.size:
        return
    difference = np.abs(losses[mine] - twin_losses[theirs]) / np.maximum(np.abs(losses[mine]), 1e-12)
    accuracy = np.abs(accuracies[mine] - twin_accuracies[theirs])
    limit, accuracy_limit = np.maximum.accumulate(difference), np.maximum.accumulate(accuracy)
    framework = os.path.basename(path)
    notes = (
        f"measured by the run {run_id} ({framework}) against its twin from kernels and pixels moved by "
        f"{measured.size:.3g} (algorithms/run/yardstick.py), {'its epoch check' if check else 'its own rows'}",
        "the yardstick of a same-seed pair at these settings where no shipped envelope covers them",
    )
    settings = dict(measured.settings)
    if check:
        settings["part"] = config.part if config.part != "run" else "epoch check"
    write_envelope_file(
        yardstick_envelope(config.results_dir, yardstick_key(measured.settings), check),
        notes,
        settings,
        common,
        limit,
        accuracy_limit,
        {"twin": difference},
    )


def _series(rows: list) -> tuple:
    """(steps, losses, accuracies) of a run's init row (as step 0) and train rows."""
    kept = [row for row in rows if row["phase"] in ("init", "train")]
    return (
        np.array([row["step"] for row in kept]),
        np.array([row["loss"] for row in kept], np.float64),
        np.array([row["accuracy"] if row["accuracy"] is not None else 0.0 for row in kept], np.float64),
    )


def _twin_csv(folder: str, run_csv: str, check: bool = False) -> str:
    """The twin's rows of the run whose rows are in `run_csv`, published under <key>/twin/."""
    return os.path.join(folder, "twin", CHECK_FOLDER if check else "", os.path.basename(run_csv))


def discard(scratch: str, folder: str, results_dir: str) -> None:
    """A twin that did not finish: its rows removed, and its folders where they are empty."""
    shutil.rmtree(scratch, ignore_errors=True)
    for empty in (folder, os.path.dirname(folder)):
        if empty.startswith(results_dir) and os.path.isdir(empty) and not os.listdir(empty):
            os.rmdir(empty)


def publish(scratch: str, final: str) -> None:
    """Every file under `scratch` moved to the same place under `final`, then `scratch` removed."""
    for folder, _, files in os.walk(scratch):
        target = os.path.join(final, os.path.relpath(folder, scratch))
        os.makedirs(target, exist_ok=True)
        for name in files:
            os.replace(os.path.join(folder, name), os.path.join(target, name))
    shutil.rmtree(scratch, ignore_errors=True)
