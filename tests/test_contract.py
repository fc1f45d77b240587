"""The wrapper contract (algorithms/run/contract.py): every wrapper of the registry meets it,
each in its own process with its own environment (Keras's backend is chosen at import;
the legacy ones run in tests/legacy/), and the checker itself catches a broken wrapper."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from algorithms.run.contract import StepResult, Support, check_wrapper, known_flags
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.spec.parallel import STRATEGIES
from algorithms.paths import REPO_ROOT
from tests.conftest import framework_param

MAIN_ENV = [framework for framework in FRAMEWORKS if framework.venv == "main"]


def assert_meets_the_contract(framework, timeout: int = 300) -> None:
    """`python -m algorithms.run.contract` for one registry framework, in its own process and
    environment (tests/legacy/ calls this from .venv-legacy's Python)."""
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.run.contract", framework.package],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "meets the wrapper contract" in proc.stdout


@pytest.mark.parametrize("framework", [framework_param(f) for f in MAIN_ENV], ids=[f.name for f in MAIN_ENV])
def test_every_wrapper_meets_the_contract(framework):
    assert_meets_the_contract(framework)


BROKEN = {
    "__init__.py": "from algorithms.run.contract import Support\n"
    "def supported():\n    return Support(('single', 'warp'), ('--accumulate', '--turbo'))\n"
    "def prepare_process(config, dataset):\n    pass\n",  # no launch
    "model.py": "def build_model(network, weights):\n    return None\n",
    "trainer.py": "class BrokenTrainer:\n    def to_batch(self, images, labels):\n        return images\n"
    "def build_trainer(config):\n    return BrokenTrainer()\n",
    "train.py": "def describe_runtime():\n    return ('broken', 'broken', {}, 'cpu')\n"
    "def records(config):\n    return True\n"
    "def train(session):\n    return {}\n",  # no initial_loss_and_logits
    "native.py": "STEPS_PER_CALL = 1\n",
    "determinism.py": "def enable():\n    return [], []\n",
}


def test_the_checker_names_each_way_a_wrapper_breaks_the_contract(tmp_path, monkeypatch):
    package = tmp_path / "broken_wrapper"
    package.mkdir()
    for name, text in BROKEN.items():
        (package / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    problems = check_wrapper("broken_wrapper", STRATEGIES, known_flags())
    expected = [
        "broken_wrapper: no launch",
        "broken_wrapper.train: no initial_loss_and_logits",
        "broken_wrapper.native: no apply_threads",
        "broken_wrapper.native: no profile_ops",
        "broken_wrapper.supported(): unknown strategy 'warp'",
        "broken_wrapper.supported(): unknown flag '--turbo'",
        "broken_wrapper.train.describe_runtime() returned tuple, not Runtime",
        "broken_wrapper.trainer.BrokenTrainer: no step (Trainer)",
        "broken_wrapper.trainer.BrokenTrainer: no save_checkpoint (Trainer)",
    ]
    for problem in expected:
        assert problem in problems, (problem, problems)
    assert not any("to_batch" in problem for problem in problems)  # what it has is not reported
    assert not any("build_model" in problem or "determinism" in problem for problem in problems)


def test_the_contract_types_hold_their_values():
    assert StepResult(1.5, 0.25).comm_time_ms is None
    assert Support(("single",), ()).advice == {}
    assert "--accumulate" in known_flags() and "--checkpoint_every" in known_flags()
