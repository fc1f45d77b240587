"""--precision and --execution with real runs: bf16 trains (the loss falls) and really
computes in bfloat16 (its losses differ from float32 by bf16's rounding, not more);
fp16 writes its loss scale to the CSV and results.log, and an overflow is a skipped
step; every execution mode trains, agrees with the others and is recorded; what a
framework does not run is refused in one line."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from tests.conftest import run_script
from tests.helpers.flags import run_flags

NETWORK = "cnn2d_2layer_full_connected_2layer"  # the smaller spec: bf16 / fp16 on CPU are slow
STEPS = 12


def train(small_data, tmp_path, script, flags, env=None, steps=STEPS, run_id="run", batch=32):
    results = tmp_path / "results"
    args = run_flags(
        small_data / "train.csv",
        results,
        network=NETWORK,
        batch_size=batch,
        max_steps=steps,
        results_log=tmp_path / "results.log",
        run_id=run_id,
    )
    proc = run_script(script, args + list(flags), env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (path,) = results.glob("*.csv")
    with open(path, newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["run_id"] == run_id and r["phase"] == "train"]
    return rows, (tmp_path / "results.log").read_text()


def log_field(log: str, key: str) -> str:
    return [line for line in log.splitlines() if line.startswith(key + ":")][-1]


def losses(rows) -> np.ndarray:
    return np.array([float(r["loss"]) for r in rows])


BF16_CASES = [
    ("torch_script.py", None),
    ("tensorflow_script.py", None),
    ("keras_script.py", {"KERAS_BACKEND": "tensorflow"}),
]


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize("script, env", BF16_CASES, ids=["torch", "tensorflow", "keras_tensorflow"])
def test_bf16_trains_and_differs_from_fp32_by_bf16_rounding_only(small_data, tmp_path, script, env):
    bf16, log = train(small_data, tmp_path, script, ["--precision", "bf16"], env, run_id="bf16")
    fp32, _ = train(small_data, tmp_path, script, [], env, run_id="fp32")
    low, full = losses(bf16), losses(fp32)
    assert len(low) == STEPS and np.isfinite(low).all()
    assert low[-3:].mean() < low[0] - 0.1, f"bf16 loss did not fall: {low}"
    relative = np.abs(low - full) / full
    # computed in bfloat16 (8-bit mantissa): not float32's ~1e-7, yet close to the float32 run
    assert relative.max() > 1e-5, f"bf16 losses equal float32's: bf16 did not run ({relative})"
    assert relative[0] < 2e-2
    assert "bf16" in log_field(log, "precision") and all(r["loss_scale"] == "" for r in bf16)


@pytest.mark.slow  # float16 convolutions on CPU: seconds per step
def test_fp16_records_its_loss_scale_per_step_and_in_results_log(small_data, tmp_path):
    """LossScaleOptimizer's initial scale, 2^15, on every row (Keras's own optimizer: Keras's
    fp16 path uses the same class)."""
    scale = 32768.0
    rows, log = train(small_data, tmp_path, "tensorflow_script.py", ["--precision", "fp16"], steps=3, batch=8)
    assert [float(r["loss_scale"]) for r in rows] == [scale] * 3  # no overflow: the initial scale is kept
    assert np.isfinite(losses(rows)).all()
    line = log_field(log, "precision")
    assert f"loss scale {scale:g} at step 1" in line and "skipped steps (overflowed gradients): 0 of 3" in line


def test_torch_fp16_skips_a_step_whose_gradients_overflow(small_data):
    """A loss scale float16 cannot hold makes GradScaler skip the step and halve the scale:
    the weights stay as they were and the step says it was skipped."""
    import torch

    from algorithms.config.run_config import parse_config
    from algorithms.dataset.data import load_dataset
    from algorithms.network.dropout import uniforms
    from torch_wrapper.trainer import build_trainer

    config = parse_config(
        ["--network", NETWORK, "--precision", "fp16", "--threads", "2", "--train", str(small_data / "train.csv")],
        "torch_script.py",
        "",
    )
    data = load_dataset(config.train, None, None, 0.2, 0)
    trainer = build_trainer(config)
    batch = [trainer.to_batch(data.train_x[:8], data.train_y[:8], uniforms(config.network, 0, 0, np.arange(8)))]
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**40)  # x 2^40: float16 gradients overflow
    before = [p.detach().clone() for p in trainer.model.parameters()]
    skipped = trainer.step(batch)
    assert skipped.loss_scale == 2.0**40 and skipped.skipped
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
    trainer.scaler = torch.amp.GradScaler("cpu")  # 2^16: fits
    applied = trainer.step(batch)
    assert applied.loss_scale == 2.0**16 and not applied.skipped
    assert not all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))


SLOW = pytest.mark.slow  # three Keras runs, each over 10 s on 2 busy cores
EXECUTION_CASES = [
    ("tensorflow_script.py", None, ["eager", "graph", "compiled"], "tf.function"),
    pytest.param(
        "keras_script.py", {"KERAS_BACKEND": "tensorflow"}, ["eager", "graph", "compiled"], "run_eagerly", marks=SLOW
    ),
    pytest.param("keras_script.py", {"KERAS_BACKEND": "jax"}, ["eager", "compiled"], "jax.jit", marks=SLOW),
]


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize(
    "script, env, modes, words", EXECUTION_CASES, ids=["tensorflow", "keras_tensorflow", "keras_jax"]
)
def test_each_execution_mode_trains_the_same_steps_and_is_recorded(small_data, tmp_path, script, env, modes, words):
    runs = {}
    for mode in modes:
        rows, log = train(small_data, tmp_path, script, ["--execution", mode], env, steps=4, run_id=mode)
        runs[mode] = losses(rows)
        assert log_field(log, "execution").split(":", 2)[1].strip() == mode
        assert f"execution={mode}" in log_field(log, "config")
    assert words in log
    for mode in modes:  # the same steps, traced or not: equal to float32 tolerance, but a compiler
        # draws dropout masks with its own generator (XLA's, Inductor's), so there they differ by dropout
        np.testing.assert_allclose(runs[mode], runs[modes[0]], rtol=2e-2 if mode == "compiled" else 1e-4)


@pytest.mark.slow
def test_torch_eager_and_compiled_train_the_same_steps(small_data, tmp_path):
    eager, log = train(small_data, tmp_path, "torch_script.py", ["--execution", "eager"], steps=4)
    compiled, log = train(small_data, tmp_path, "torch_script.py", ["--compile"], steps=4, run_id="c")
    assert "torch.compile" in log_field(log, "execution") and "execution=compiled" in log_field(log, "config")
    np.testing.assert_allclose(losses(compiled), losses(eager), rtol=2e-2)  # Inductor draws its own dropout masks


@pytest.mark.parametrize(
    "script, env, flags, message",
    [
        ("torch_script.py", None, ["--execution", "graph"], "--execution graph: PyTorch runs eager"),
        ("keras_script.py", {"KERAS_BACKEND": "jax"}, ["--execution", "graph"], "no graph mode apart from"),
        ("torch_script.py", None, ["--compile", "--execution", "eager"], "--compile is --execution compiled"),
        ("torch_script.py", None, ["--precision", "bf16", "--strategy", "pipeline", "--devices", "2"], "mixed"),
        ("caffe_script.py", None, ["--precision", "bf16"], "Caffe trains in float32 only here"),
        ("caffe_script.py", None, ["--execution", "eager"], "Caffe is graph-only"),
        ("keras_script.py", {"KERAS_BACKEND": "theano"}, ["--compile"], "Keras 2 on Theano is graph-only"),
        ("torch_script.py", None, ["--precision", "fp8"], "invalid choice: 'fp8'"),
        ("tensorflow_script.py", None, ["--compile", "--parity"], "no deterministic XLA"),
        ("keras_script.py", {"KERAS_BACKEND": "tensorflow"}, ["--compile", "--parity"], "no deterministic XLA"),
    ],
)
def test_what_a_framework_does_not_run_is_refused_in_one_line(small_data, tmp_path, script, env, flags, message):
    from algorithms.run.entry import check_supported
    from algorithms.config.run_config import parse_config
    from algorithms.errors import InputError

    if script == "caffe_script.py" or (env or {}).get("KERAS_BACKEND") == "theano":
        # checked in this process: the entry script needs pycaffe / Theano just to start

        from algorithms.registry.capabilities import environment

        config = parse_config(["--train", str(small_data / "train.csv"), *flags], script, "")
        module = "caffe_wrapper.train" if script == "caffe_script.py" else "keras_wrapper.train"
        with environment(env or {}), pytest.raises(InputError, match=message) as refused:
            check_supported(config, module, script)
        assert "\n" not in str(refused.value)
        return
    files = ["--train", str(small_data / "train.csv"), "--test", str(small_data / "test.csv")]
    proc = run_script(script, [*files, "--results_dir", str(tmp_path), *flags], env)
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.csv"))
