"""--device auto|cpu|gpu (algorithms/machine/devices.py, the entry point's checks): where no
GPU can be used, --device gpu is one line and status 2, naming why (no GPU on the machine,
every GPU hidden, or a CPU-only build of the framework); every CSV row, settings record and
results.log block says where the run trained; a GPU run is never judged against a CPU run,
and a GPU run finds no envelope measured on the CPU; where frameworks ran on different kinds
of device, the lines against the first judge each against the first on its own kind. The
recorder's device column comes from real runs; the verdicts of other devices from a real
CPU run relabelled (tests/helpers/synthetic_runs.relabel) or runs written by hand."""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from algorithms.analysis.compare import build_report, format_against_first
from algorithms.analysis.drift_envelope import build_envelope, envelope_path, write_envelope
from algorithms.analysis.runs import load_run
from algorithms.analysis.settings import Settings
from algorithms.analysis.verdict import Yardsticks, judge
from algorithms.errors import InputError
from algorithms.machine import devices
from algorithms.paths import BASELINE_DIR, REPO_ROOT
from algorithms.records import read_rows, read_settings, results_csv_name
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.registry.capabilities import environment
from backends.gpu_builds import jax_build, tensorflow_build, torch_build
from tests.conftest import framework_param, run_script
from tests.helpers.flags import run_flags
from tests.helpers.synthetic_runs import DEFAULT_SETTINGS, relabel, write_run

NETWORK = "cnn2d_3layer_fullconnected_3layer"


@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A machine whose driver lists one GPU (the driver's own folder, made here): what the
    checks read before any framework loads. The frameworks themselves stay as installed."""
    folder = tmp_path / "nvidia_gpus"
    (folder / "0000:41:00.0").mkdir(parents=True)
    monkeypatch.setattr(devices, "NVIDIA_GPUS", str(folder))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return folder


def test_cuda_visible_devices_counts_as_cuda_does(fake_gpu, monkeypatch):
    (fake_gpu / "0000:42:00.0").mkdir()
    assert devices.visible_gpus() == 2 and devices.no_gpu_reason(2) is None
    for listed, visible in (("1", 1), ("0,1", 2), ("1,7,0", 1), ("-1", 0), ("", 0), ("GPU-3f2a", 1)):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
        assert devices.visible_gpus() == visible, listed
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # what --device cpu sets
    assert "hides this machine's 2 GPU(s)" in devices.no_gpu_reason()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert devices.no_gpu_reason(2) == "2 GPUs asked for (--devices 2), and 1 visible here"


@pytest.mark.skipif(torch_build() is None, reason="this environment has torch's CUDA build")
def test_a_gpu_machine_with_the_cpu_builds_refuses_device_gpu_naming_each_build(fake_gpu, tiny_train, tmp_path):
    from algorithms.run.entry import start_run

    flags = ["--device", "gpu", "--train", str(tiny_train), "--test", "none", "--results_dir", str(tmp_path / "r")]
    cases = (
        ("torch_wrapper.train", {}, r"torch 2\.13\.0\+cpu here is a CPU-only build"),
        ("tensorflow_wrapper.train", {}, "TensorFlow 2.21.0 here is a CPU-only build"),
        ("keras_wrapper.train", {"KERAS_BACKEND": "jax"}, "jax 0.10.2 here has no CUDA plugin"),
        ("keras_wrapper.train", {"KERAS_BACKEND": "torch"}, "torch 2.13.0"),
    )
    for module, env, why in cases:
        with environment(env), pytest.raises(InputError, match=f"^--device gpu: {why}.*make gpu-setup"):
            start_run(module, "script.py", "", flags)
    assert not os.path.exists(tmp_path / "r")  # refused before anything was written
    assert (torch_build(), tensorflow_build(), jax_build()) != (None, None, None)


def test_device_cpu_hides_every_gpu_and_keeps_jax_on_its_cpu_platform(monkeypatch):
    from algorithms.run.entry import place_device
    from keras_wrapper import supported

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    config = type("Config", (), {"device": "cpu"})()
    with environment({"KERAS_BACKEND": "jax"}):
        place_device(config, supported())
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "-1" and os.environ["JAX_PLATFORMS"] == "cpu"
    assert devices.visible_gpus() == 0


def test_run_all_refuses_device_gpu_without_a_gpu_before_any_framework_runs(tmp_path):
    if devices.machine_gpus():
        pytest.skip("this machine has a GPU")
    proc = run_script("run_all.py", ["--device", "gpu", "--results_dir", str(tmp_path / "r")], timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "\n" not in err and "Traceback" not in err, proc.stdout + proc.stderr
    assert err.startswith("error: --device gpu: no NVIDIA GPU on this machine"), err
    assert not os.path.exists(tmp_path / "r")


# --------------------------------------------------------------------------- one real run, recorded


@pytest.fixture(scope="module")
def cpu_run(small_data, tmp_path_factory):
    """One real torch run on the CPU, --device cpu: (its CSV, its run id, results.log)."""
    folder = tmp_path_factory.mktemp("device_run")
    results = folder / "results"
    flags = ["--device", "cpu", "--max_steps", "4", "--batch_size", "32", "--test", "none", "--quiet"]
    flags += ["--train", str(small_data / "train.csv"), "--results_dir", str(results), "--run_id", "cpu-run"]
    proc = run_script("torch_script.py", flags, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(results / f"{NETWORK}_torch.csv"), "cpu-run", folder / "results.log"


@pytest.mark.slow  # every framework, one short run each
@pytest.mark.parametrize("framework", [pytest.param(f, marks=framework_param(f).marks, id=f.name) for f in FRAMEWORKS])
def test_device_cpu_keeps_every_framework_on_the_cpu(framework, tiny_train, tmp_path):
    """Told a GPU is visible (CUDA_VISIBLE_DEVICES=0), a --device cpu run still records the CPU."""
    results = tmp_path / "results"
    argv = run_flags(tiny_train, results, device="cpu", max_steps=1, batch_size=16, run_id="on-cpu")
    proc = run_script(framework.script, argv, {**framework.env, "CUDA_VISIBLE_DEVICES": "0"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = str(results / results_csv_name(NETWORK, framework.framework, framework.backend))
    assert {row["device"] for row in read_rows(path, "on-cpu")} == {"cpu"}
    assert read_settings(path)["on-cpu"]["device"] == "cpu"
    log = (tmp_path / "results.log").read_text()
    assert "\ndevice:      cpu (cpu): " in log and log.count("; --device cpu\n") == 1, log


def test_every_row_the_settings_record_and_results_log_say_where_the_run_trained(cpu_run):
    path, run_id, log = cpu_run
    header = open(path).readline().strip().split(",")
    assert header[-1] == "device"
    rows = read_rows(path, run_id)
    assert {"init", "train"} <= {row["phase"] for row in rows} and {row["device"] for row in rows} == {"cpu"}
    settings = read_settings(path)[run_id]
    assert settings["device"] == "cpu" and settings["device_detail"].startswith(devices.cpu_name())
    line = next(line for line in log.read_text().splitlines() if line.startswith("device:"))
    assert line.split(None, 1)[1].startswith("cpu (cpu): ") and line.endswith("--device cpu")


def test_two_runs_recorded_on_different_devices_are_never_judged(cpu_run, tmp_path):
    path, run_id, _ = cpu_run
    gpu_path = relabel(path, run_id, tmp_path, "on-gpu", device="gpu", device_detail="NVIDIA H200")
    (tmp_path / "again").mkdir()
    same_path = relabel(path, run_id, tmp_path / "again", "again", device_detail="another CPU")
    assert {row["device"] for row in read_rows(gpu_path, "on-gpu")} == {"cuda:0"}
    cpu, gpu, again = load_run(f"{path}@{run_id}"), load_run(f"{gpu_path}@on-gpu"), load_run(f"{same_path}@again")
    yardsticks = Yardsticks([cpu, gpu, again], BASELINE_DIR)
    verdict = judge(cpu, gpu, yardsticks)  # the same losses: only the device's kind keeps them apart
    assert verdict.word == verdict.settings_line == "settings differ: device cpu vs gpu", verdict
    assert judge(cpu, again, yardsticks).word == "same"  # another device model alone is no setting


def test_an_older_csv_without_the_device_column_reads_as_a_cpu_run(cpu_run, tmp_path):
    path, run_id, _ = cpu_run
    lines = open(path).read().splitlines()
    older = tmp_path / os.path.basename(path)
    older.write_text("\n".join(line.rsplit(",", 1)[0] for line in lines) + "\n")  # the column cut off
    assert {row["device"] for row in read_rows(str(older))} == {"cpu"}
    assert load_run(f"{older}@{run_id}").settings.get("device") == "cpu"  # no record: from its rows


# --------------------------------------------------------------------------- verdicts across devices


@pytest.fixture
def cpu_envelope(tmp_path) -> str:
    """A baseline folder holding a drift envelope made by hand (1e-6 at every step), measured
    at the default run's settings on the CPU, as the shipped ones are."""
    steps = np.arange(0, 6)
    envelope = build_envelope(
        {"cross_framework": [(steps, np.full(6, 1e-6))]}, Settings(DEFAULT_SETTINGS), ("by hand",)
    )
    folder = tmp_path / "baseline"
    write_envelope(envelope, envelope_path(str(folder), NETWORK, "default"))
    return str(folder)


def test_a_gpu_pair_finds_no_envelope_measured_on_the_cpu(tmp_path, cpu_envelope):
    losses = [2.3, 2.2, 2.1, 1.9, 1.7]
    nudged = [2.3, 2.2000001, 2.1000002, 1.9000003, 1.7000005]
    runs = {}
    for device in ("cpu", "gpu"):
        folder = tmp_path / device
        folder.mkdir()
        a = write_run(folder, "torch/torch", "a", losses, 0.5, device=device, dropout="shared")
        b = write_run(folder, "tensorflow/tensorflow", "a", nudged, 0.5, device=device, dropout="shared")
        runs[device] = judge(load_run(a), load_run(b), Yardsticks([], cpu_envelope))
    assert runs["cpu"].word.startswith("within drift"), runs["cpu"]
    assert runs["gpu"].word == "no band", runs["gpu"]
    assert any("no drift envelope for these settings" in line for line in runs["gpu"].evidence)


def test_each_framework_is_judged_against_the_first_on_its_own_kind_of_device(tmp_path, cpu_envelope):
    """run_all.py on a GPU machine: the first (TensorFlow) on the GPU, Lasagne on the CPU, and
    the first once more on the CPU (run_all.py's <run_id>-cpu)."""
    losses, runs = [2.3, 2.2, 2.1, 1.9, 1.7], tmp_path / "runs"
    runs.mkdir()
    first = write_run(runs, "tensorflow/tensorflow", "r", losses, 0.5, device="gpu", dropout="shared")
    lasagne = write_run(runs, "lasagne/theano", "r", [x * 1.0000001 for x in losses], 0.5, dropout="shared")
    twin = write_run(runs, "tensorflow/tensorflow", "r-cpu", losses, 0.5, dropout="shared")
    report = build_report([f"{first}@r", f"{lasagne}@r", f"{twin}@r-cpu"], [0.5], cpu_envelope)
    text = format_against_first(report)
    # the answer first: Lasagne within drift of the CPU twin; the twin against the GPU run has no verdict
    answer = "no pair of 2 differs for real: 1 within drift, 1 without a verdict (settings differ)"
    assert text.startswith(answer + "\nverdicts against tensorflow/tensorflow (gpu)")
    lasagne_line = next(line for line in text.splitlines() if line.startswith("  lasagne/theano (cpu)"))
    assert "settings differ" not in lasagne_line and "within drift" in lasagne_line, text
    assert "against tensorflow/tensorflow r-cpu (cpu): the first on the same kind of device" in " ".join(text.split())
    twin_line = next(line for line in text.splitlines() if "r-cpu (cpu)  " in line)
    assert "settings differ: device gpu vs cpu" in twin_line, text


# --------------------------------------------------------------------------- the GPU environment


def test_gpu_setup_is_one_opt_in_target_building_its_own_env_with_the_cuda_builds():
    def dry(target: str) -> str:
        proc = subprocess.run(
            ["make", "-n", "--no-print-directory", target], cwd=REPO_ROOT, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    plan = dry("gpu-setup")
    assert "-m venv .venv-gpu" in plan and ".venv-gpu/bin/python -m pip install" in plan
    assert " .venv/" not in plan  # the CPU env is left as it is
    with open(os.path.join(REPO_ROOT, "requirements-gpu.txt")) as handle:
        pins = [line.split("#")[0].strip() for line in handle if line.split("#")[0].strip()]
    assert pins == ["torch==2.13.0", "tensorflow[and-cuda]==2.21.0", "jax[cuda12]==0.10.2", "jaxlib==0.10.2"]
    for target in ("setup", "compare", "test"):  # nothing of it is downloaded unless asked for
        assert "gpu" not in dry(target).replace("gpu_check", "")
