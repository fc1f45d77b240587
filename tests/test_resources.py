"""A run never asks for more than the machine has (algorithms/machine/resources.py): a
device count far beyond this machine's memory is refused in one line, exit 2, before
any process of the run starts, for every framework and strategy that starts processes
or devices; a process that cannot be started ends the run in one line and leaves none
behind; a run's processes die with the process that started them."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.config.run_config import parse_config
from algorithms.machine.resources import available_memory_mb, descendants
from tests.conftest import write_random_kaggle_train

HANDFUL = 3  # the most processes a refused run may ever have had under it
REFUSED_WITHIN_S = 60  # before the framework loads: seconds, even on a loaded 2-core machine
SAMPLE_EVERY_S = 0.02
RUNAWAY_RSS_MB = 2000  # a run not refused is stopped before it can load its framework's devices


def vm_rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next((int(line.split()[1]) / 1024 for line in handle if line.startswith("VmRSS:")), 0.0)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


class Watched:
    """A command whose process tree is sampled while it runs: the most processes it ever
    had under it. A run that gets past its check is stopped (its process group killed)
    as soon as it starts more than a handful or grows past RUNAWAY_RSS_MB."""

    def __init__(self, command: list, env: dict, timeout_s: float = 300):
        self.most_children, self.stopped = 0, ""
        started = time.monotonic()
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True,
        )  # fmt: skip
        sampler = threading.Thread(target=self._sample, args=(started + timeout_s,), daemon=True)
        sampler.start()
        self.stdout, self.stderr = self.proc.communicate()
        self.seconds = time.monotonic() - started
        sampler.join()

    def _sample(self, deadline: float) -> None:
        while self.proc.poll() is None:
            under = descendants(self.proc.pid)
            self.most_children = max(self.most_children, len(under))
            if len(under) > HANDFUL or vm_rss_mb(self.proc.pid) > RUNAWAY_RSS_MB or time.monotonic() > deadline:
                self.stopped = f"{len(under)} processes, {vm_rss_mb(self.proc.pid):.0f} MB"
                os.killpg(self.proc.pid, signal.SIGKILL)
                return
            time.sleep(SAMPLE_EVERY_S)


def entry_env(framework_env: dict) -> dict:
    return {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2", **framework_env}


def support_of(package: str, framework_env: dict):
    """The wrapper's Support as the entry script will read it (no framework is imported)."""
    import importlib

    saved = {name: os.environ.get(name) for name in framework_env}
    os.environ.update(framework_env)
    try:
        return importlib.import_module(package).supported()
    finally:
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.__setitem__(name, value)


# (script, package, environment, strategy): every one that starts processes or devices
STARTERS = [
    ("torch_script.py", "torch_wrapper", {}, strategy)
    for strategy in ("data", "model", "tensor", "pipeline", "hybrid", "ps", "async", "localsgd")
] + [
    ("tensorflow_script.py", "tensorflow_wrapper", {}, "data"),
    ("tensorflow_script.py", "tensorflow_wrapper", {}, "ps"),
    ("keras_script.py", "keras_wrapper", {"KERAS_BACKEND": "tensorflow"}, "data"),
    ("keras_script.py", "keras_wrapper", {"KERAS_BACKEND": "jax"}, "data"),
    ("keras_script.py", "keras_wrapper", {"KERAS_BACKEND": "jax"}, "tensor"),
    ("keras_script.py", "keras_wrapper", {"KERAS_BACKEND": "jax"}, "hybrid"),
]
IDS = [f"{package.split('_')[0]}{env.get('KERAS_BACKEND', '')}-{strategy}" for _, package, env, strategy in STARTERS]


def far_beyond(package: str, env: dict, strategy: str, folder, small_data) -> tuple:
    """(flags, refused by memory): the fewest devices whose estimate is twice what this
    machine has free. Devices inside one process cost little each, and a data-parallel
    count must divide the batch, which the training rows must hold: the data is made as
    large as that count needs. A strategy whose plan takes only as many devices as it has
    layers to split is asked for 1000, which its plan refuses."""
    base = ["--test", "none", "--results_dir", str(folder / "results"), "--results_log", str(folder / "results.log")]
    base += ["--strategy", strategy] + (
        ["--inner", "tensor"] if strategy == "hybrid" and package == "keras_wrapper" else []
    )
    flags = [*base, "--train", str(small_data / "train.csv"), "--devices", "1000"]
    if strategy in ("model", "tensor", "pipeline"):
        return flags, False
    footprint, beyond = support_of(package, env).footprint, 2 * available_memory_mb()
    count = 1000
    while footprint.need_mb(footprint.started(parse_config(flags[:-1] + [str(count)], "t", "")), 0, count) <= beyond:
        count *= 2
        flags = [*base, "--train", str(folder / "train.csv"), "--batch_size", str(count), "--devices", str(count)]
    if count > 1000:
        write_random_kaggle_train(folder / "train.csv", math.ceil(count / 0.8) + 1, seed=0)
    return flags, True


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize("script, package, env, strategy", STARTERS, ids=IDS)
def test_a_count_far_beyond_the_machine_is_refused_in_one_line_before_anything_starts(
    script, package, env, strategy, small_data, tmp_path
):
    flags, by_memory = far_beyond(package, env, strategy, tmp_path, small_data)
    run = Watched([sys.executable, script, *flags], entry_env(env))
    assert not run.stopped, f"not refused: stopped at {run.stopped}; {run.stderr[-2000:]}"
    assert run.proc.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    assert run.most_children <= HANDFUL and run.seconds < REFUSED_WITHIN_S, (run.most_children, run.seconds)
    assert not (tmp_path / "results").exists()
    if by_memory:
        devices = flags[flags.index("--devices") + 1]
        assert f"--devices {devices} needs about " in run.stderr and "MB free (MemAvailable)" in run.stderr, run.stderr
        assert "the most that fits is --devices " in run.stderr, run.stderr
        fits = int(run.stderr.split("the most that fits is --devices ")[1].split()[0])
        assert 1 <= fits < int(devices)


def test_more_devices_than_cores_are_let_through_with_one_note(small_data, monkeypatch):
    """How a small machine shows N devices: allowed, said once, by the process that starts them."""
    from algorithms.machine.resources import check_resources

    cores = os.cpu_count() or 1
    devices = cores + 1
    flags = ["--train", str(small_data / "train.csv"), "--strategy", "async", "--devices", str(devices)]
    config = parse_config([*flags, "--batch_size", str(10 * devices)], "torch_script.py", "")
    footprint = support_of("torch_wrapper", {}).footprint
    said = check_resources(config, footprint, 1.0)
    assert len(said) == 1 and said[0].startswith(f"note: {devices} Hogwild workers and the process that records "), said
    assert f"on {cores} cores: {devices / cores:.1f}x oversubscribed" in said[0]
    monkeypatch.setenv("WORLD_SIZE", str(devices))  # a torchrun rank: its launcher checked
    assert check_resources(parse_config([*flags, "--batch_size", str(10 * devices)], "t", ""), footprint, 1.0) == []


# --------------------------------------------------------------------------- the network's own memory

DIGITS_NET = os.path.join(REPO_ROOT, "examples", "digits_8x8.toml")


def digits_with(tmp_path, layer: str, before: str = "Dropout") -> str:
    """examples/digits_8x8.toml with `layer` (a [[layers]] table) before its layer of type `before`."""
    with open(DIGITS_NET) as handle:
        text = handle.read()
    marker = f'[[layers]]\ntype = "{before}"'
    assert marker in text
    (tmp_path / "big.toml").write_text(text.replace(marker, layer + "\n\n" + marker))
    return str(tmp_path / "big.toml")


def digits_npz(tmp_path) -> str:
    import numpy as np

    np.savez(tmp_path / "digits.npz", x=np.zeros((40, 8, 8), np.uint8), y=np.arange(40) % 10)
    return str(tmp_path / "digits.npz")


def figures(err: str) -> tuple:
    """(the need, the free memory) a refusal names, in MB."""
    need = float(err.split("needs about ")[1].split(" MB")[0].replace(",", ""))
    free = float(err.split("this machine has ")[1].split(" MB free")[0].replace(",", ""))
    return need, free


def test_a_network_too_big_for_this_machine_is_refused_naming_its_largest_layer(tmp_path, capsys):
    """The issue's case: a Dense of 2,000,000,000 units started, wrote three files and ended at
    step 1 blaming --batch_size. Now refused before anything: the layer, both figures, the fix."""
    from tests.helpers.refused import run_refused

    network = digits_with(tmp_path, '[[layers]]\ntype = "Dense"\nunits = 2000000000')
    err = run_refused(tmp_path, capsys, ["--network", network, "--train", digits_npz(tmp_path), "--test", "none"])
    assert "to train in torch at batch 32 (its largest layer, layer 6 Dense 2000000000: " in err, err
    assert "MB of weights, their gradients and adam's state" in err and "make layer 6 smaller" in err, err
    need, free = figures(err)
    assert need > free and free == pytest.approx(available_memory_mb(), rel=0.5)


def test_a_batch_whose_activations_do_not_fit_is_refused_with_the_largest_batch_that_does(tmp_path, capsys):
    """Activations, not weights: a wide convolution at the network file's own batch of ten
    million (a preset's batch may exceed the rows). The batch the line offers passes the check."""
    from algorithms.errors import InputError
    from algorithms.machine.network_memory import network_memory
    from algorithms.machine.resources import check_network_fits, dataset_mb
    from algorithms.run.entry import prepare
    from tests.helpers.refused import run_refused
    from torch_wrapper import FOOTPRINT

    wide = '[[layers]]\ntype = "Conv2D"\nfilters = 4096\nkernel_size = 1\npadding = "same"'
    network = digits_with(tmp_path, wide, before="Flatten")
    with open(network) as handle:
        text = handle.read().replace("batch_size = 32", "batch_size = 10000000")
    with open(network, "w") as handle:
        handle.write(text)
    train = digits_npz(tmp_path)
    err = run_refused(tmp_path, capsys, ["--network", network, "--train", train, "--test", "none"])
    assert "at batch 10000000 (its largest layer, layer 5 Conv2D 4096 1x1 same: " in err, err
    assert "MB of activations" in err and "; use --batch_size " in err, err
    batch = int(err.split("use --batch_size ")[1].split()[0])
    _, free = figures(err)  # MemAvailable moves: the figures the line was made with, to the MB it shows
    config, dataset = prepare(["--network", network, "--train", train], "t", "")  # the file's batch: its rows pass
    memory, data_mb = network_memory(config.network, config.optimizer), dataset_mb(dataset)
    check_network_fits(replace(config, batch_size=batch), FOOTPRINT, memory, data_mb, free + 1)  # let through
    with pytest.raises(InputError, match=f"at batch {2 * batch} "):
        check_network_fits(replace(config, batch_size=2 * batch), FOOTPRINT, memory, data_mb, free)


def test_run_all_refuses_a_network_too_big_before_any_framework_starts(tmp_path):
    network = digits_with(tmp_path, '[[layers]]\ntype = "Dense"\nunits = 2000000000')
    flags = ["--network", network, "--train", digits_npz(tmp_path), "--results_dir", str(tmp_path / "results")]
    run = Watched([sys.executable, "run_all.py", *flags], entry_env({}))
    assert run.proc.returncode == 2 and not run.stopped, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stderr.startswith("error: ") and run.stderr.count("\n") == 1, run.stderr
    assert "(its largest layer, layer 6 Dense 2000000000: " in run.stderr and run.most_children == 0
    assert not (tmp_path / "results").exists() and run.stdout == ""


def test_every_framework_declares_its_measured_footprint():
    from algorithms.registry.capabilities import support
    from algorithms.registry.frameworks import FRAMEWORKS

    for framework in FRAMEWORKS:
        footprint = support(framework).footprint
        assert footprint is not None and footprint.process_mb > 50 and footprint.sample_mb > 0, framework.name
        assert footprint.name and footprint.started(parse_config([], "t", "")).processes == 0, framework.name


@pytest.mark.slow  # a torch run under the footprint sampler
def test_the_estimate_is_within_2x_of_a_real_runs_peak(tmp_path):
    """examples/digits_8x8.toml in torch at its own batch and at 1000: the check's estimate against
    the peak resident memory the run reaches (docs/own-network.md has every framework's)."""
    from algorithms.bench.memory_estimate import case_flags, estimate_mb
    from algorithms.bench.footprint import measure
    from scripts.example_data import digits_8x8

    train, _ = digits_8x8(str(tmp_path / "data"))
    for batch in (32, 1000):
        flags = case_flags("digits_8x8.toml", train, batch, steps=3)
        estimate, _ = estimate_mb("torch", flags)
        flags += ["--results_dir", str(tmp_path / "results"), "--results_log", str(tmp_path / "log")]
        processes, _, status = measure(
            [sys.executable, os.path.join(REPO_ROOT, "torch_script.py"), *flags], entry_env({}), quiet=True
        )
        peak = max(peak_mb for peak_mb, _ in processes.values())
        assert status == 0 and estimate / 2 <= peak <= 2 * estimate, (batch, estimate, peak)
