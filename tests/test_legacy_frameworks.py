"""The Theano family from the main env's side: the shared init gives Lasagne and
Keras-on-Theano (run by .venv-legacy's Python) the same initial loss and logits as
PyTorch, and the entry scripts, started with the main env's Python, re-execute
themselves in .venv-legacy. The legacy env's own tests are in tests/legacy/."""

import os

import pytest

from algorithms.registry.frameworks import FRAMEWORKS, get
from algorithms.records import read_rows
from tests.conftest import REPO_ROOT, run_script
from tests.helpers.initial_loss_probe import assert_same_initial_outputs, run_probe
from tests.test_frameworks import NETWORK

pytestmark = pytest.mark.slow  # the legacy env's frameworks, re-executed: `make test-fast` leaves them out


def test_shared_init_gives_theano_the_same_initial_loss_and_logits_as_torch(small_data):
    train_csv = str(small_data / "train.csv")
    reference = run_probe(os.path.join(REPO_ROOT, ".venv", "bin", "python"), "torch_wrapper", {}, train_csv)
    legacy = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]
    others = [run_probe(framework.python, framework.package, framework.env, train_csv) for framework in legacy]
    assert [(o["framework"], o["backend"]) for o in others] == [(f.framework, f.backend) for f in legacy]
    assert_same_initial_outputs(reference, others)


@pytest.mark.parametrize(
    "script, env, suffix",
    [
        ("lasagne_script.py", {}, "lasagne_theano"),
        ("keras_script.py", {"KERAS_BACKEND": "theano"}, "keras_theano"),  # routed to keras_theano_backend.py
    ],
    ids=["lasagne_script", "keras_script_theano"],
)
def test_main_env_python_reexecutes_in_the_legacy_env(script, env, suffix, small_data, tmp_path):
    proc = run_script(
        script,
        [
            "--train",
            str(small_data / "train.csv"),
            "--test",
            "none",
            "--max_steps",
            "2",
            "--batch_size",
            "32",
            "--results_dir",
            str(tmp_path / "results"),
            "--run_id",
            f"reexec-{suffix}",
        ],
        env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(str(tmp_path / "results" / f"{NETWORK}_{suffix}.csv"), f"reexec-{suffix}")
    assert [r["phase"] for r in rows] == ["init", "train", "train", "val"]  # init: the initial weights scored
    log = (tmp_path / "results.log").read_text()
    assert "numpy 1.23.5" in log and "THEANO_FLAGS=" in log  # it ran in .venv-legacy


def test_keras_on_theano_applies_the_shared_dropout_and_takes_tensorflows_first_step(small_data, tmp_path):
    """As tests/test_keras_dropout.py holds Keras 3: the mask rule bit for bit, and with
    dropout on the init row and step 1 equal tensorflow_script.py's, and the later steps too:
    its ReLU and max-pool take every other framework's gradient at the kinks
    (backends/theano_backend.py; with Theano's own, its first update differed by 2e-4)."""
    from tests.test_keras_dropout import assert_same_steps, assert_the_mask_rule, probe_dropout, short_run

    framework = get("keras_theano")
    assert_the_mask_rule(probe_dropout(framework), "theano")
    reference = short_run(get("tensorflow"), small_data / "train.csv", tmp_path / "tensorflow")
    got = short_run(framework, small_data / "train.csv", tmp_path / "keras_theano")
    assert_same_steps(reference, got, framework.name)
