"""ps, async and localsgd asked of what does not run them, or with flags that do not
fit: one line, status 2, naming why and the fix, before any framework loads."""

import pytest

from algorithms.config.run_config import parse_config
from algorithms.errors import InputError
from algorithms.run.entry import check_supported
from tests.conftest import run_script


def flags(small_data, tmp_path, *extra):
    return ["--train", str(small_data / "train.csv"), "--test", "none", "--results_dir", str(tmp_path / "r"), *extra]


def one_line_refusal(proc, starts_with: str) -> str:
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"error: {starts_with}"), proc.stderr
    return proc.stderr


@pytest.mark.parametrize("strategy", ["ps", "async", "localsgd"])
@pytest.mark.parametrize("script", ["keras_script.py", pytest.param("caffe_script.py", marks=pytest.mark.caffe)])
def test_frameworks_without_them_refuse_in_one_line_naming_why_and_the_script_that_runs_it(
    small_data, tmp_path, script, strategy
):
    line = one_line_refusal(
        run_script(script, flags(small_data, tmp_path, "--strategy", strategy, "--devices", "2")),
        f"--strategy {strategy}: ",
    )
    assert f"torch_script.py --strategy {strategy}" in line
    assert ("model.fit" if script == "keras_script.py" else "Caffe 1.0's solver") in line
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("strategy", ["async", "localsgd"])
def test_tensorflow_refuses_hogwild_and_local_sgd_naming_torch_script(small_data, tmp_path, strategy):
    line = one_line_refusal(
        run_script("tensorflow_script.py", flags(small_data, tmp_path, "--strategy", strategy, "--devices", "2")),
        f"--strategy {strategy}: tf.distribute has no",
    )
    assert f"torch_script.py --strategy {strategy}" in line


@pytest.mark.parametrize("strategy", ["ps", "async", "localsgd"])
def test_lasagne_refuses_them_before_theano_loads(small_data, tmp_path, strategy):
    config = parse_config(flags(small_data, tmp_path, "--strategy", strategy, "--devices", "2"), "t", "t")
    with pytest.raises(InputError, match=f"Lasagne runs one compiled Theano.*torch_script.py --strategy {strategy}"):
        check_supported(config, "lasagne_wrapper.train", "lasagne_script.py")


@pytest.mark.parametrize(
    "extra, starts_with",
    [
        (["--strategy", "data", "--devices", "2", "--sync_every", "4"], "--sync_every 4: only --strategy localsgd"),
        (["--strategy", "async", "--devices", "2", "--ps_sync"], "--ps_sync with --strategy async: only --strategy ps"),
        (
            ["--strategy", "async", "--devices", "2", "--accumulate", "2", "--batch_size", "32"],
            "--accumulate with --strategy async: ",
        ),
        (["--strategy", "ps", "--devices", "2", "--checkpoint_every", "5"], "--checkpoint_every with --strategy ps"),
        (["--strategy", "localsgd", "--devices", "3", "--batch_size", "32"], "--batch_size 32 does not divide evenly"),
    ],
    ids=["sync_every_without_localsgd", "ps_sync_without_ps", "accumulate", "checkpoints", "indivisible_batch"],
)
def test_torch_flags_that_do_not_fit_the_strategy_are_one_line(small_data, tmp_path, extra, starts_with):
    one_line_refusal(run_script("torch_script.py", flags(small_data, tmp_path, *extra)), starts_with)
    assert not (tmp_path / "r").exists()
