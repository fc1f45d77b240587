"""The wrapper contract (algorithms/contract/types.py): every wrapper of the registry meets it,
each in its own process with its own environment (Keras's backend is chosen at import;
the legacy ones run in tests/legacy/), and the checker itself catches a broken wrapper."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from algorithms.contract.types import Runtime, StepResult, Support, WrapperSession
from algorithms.contract.check import check_wrapper, known_flags, member_problems
from algorithms.machine.tuning import Tuning
from algorithms.registry.frameworks import FRAMEWORKS
from algorithms.network.parallel import STRATEGIES
from algorithms.paths import REPO_ROOT
from tests.conftest import framework_param

MAIN_ENV = [framework for framework in FRAMEWORKS if framework.venv == "main"]


def assert_meets_the_contract(framework, timeout: int = 300) -> None:
    """`python -m algorithms.contract` for one registry framework, in its own process and
    environment (tests/legacy/ calls this from .venv-legacy's Python)."""
    proc = subprocess.run(
        [sys.executable, "-m", "algorithms.contract", framework.package],
        cwd=REPO_ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **framework.env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert "meets the wrapper contract" in proc.stdout


@pytest.mark.slow  # one of the edit loop's slowest (15 s or more): make test-fast leaves it out
@pytest.mark.parametrize("framework", [framework_param(f) for f in MAIN_ENV], ids=[f.name for f in MAIN_ENV])
def test_every_wrapper_meets_the_contract(framework):
    assert_meets_the_contract(framework)


BROKEN = {
    "__init__.py": "from algorithms.contract.types import Support\n"
    "from algorithms.machine.tuning import Tuning\n"
    "def supported():\n    return Support(('single', 'warp'), ('--accumulate', '--turbo'), Tuning('broken'))\n"
    "def prepare_process(config, dataset):\n    pass\n",  # no launch
    "model.py": "def build_model(network, weights):\n    return None\n",
    "trainer.py": "class BrokenTrainer:\n    def to_batch(self, images, labels, uniforms):\n        return images\n"
    "def build_trainer(config):\n    return BrokenTrainer()\n",
    "train.py": "def describe_runtime():\n    return ('broken', 'broken', {}, 'cpu')\n"
    "def records(config):\n    return True\n"
    "def train(session):\n    return {}\n",
    "probes.py": "def initial_loss_and_logits(network, images, labels, seed=0):\n    return 0.0, images\n",
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
        "broken_wrapper.probes: no model_parameters",
        "broken_wrapper.probes: no layer_outputs_and_gradients",
        "broken_wrapper.native: no apply_threads",
        "broken_wrapper.native: no profile_ops",
        "broken_wrapper.supported(): unknown strategy 'warp'",
        "broken_wrapper.supported(): unknown flag '--turbo'",
        "broken_wrapper.supported(): no footprint, its measured memory (resources.py)",
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
    assert Support(("single",), (), Tuning("torch")).advice == {}
    assert "--accumulate" in known_flags() and "--checkpoint_every" in known_flags()


def write_package(root, name: str, files: dict) -> None:
    (root / name).mkdir()
    for file, text in files.items():
        (root / name / file).write_text(text)


# a wrapper that meets the contract in full: the known answer for "no problem"
SOUND = {
    "__init__.py": "from algorithms.contract.types import Support\n"
    "from algorithms.machine.resources import Footprint, one_process\n"
    "from algorithms.machine.tuning import Tuning\n"
    "def supported():\n"
    "    return Support(('single',), (), Tuning('sound'), footprint=Footprint(300, 0.5, 0, one_process, 'sound'))\n"
    "def prepare_process(config, dataset):\n    pass\n"
    "def launch(config, argv):\n    pass\n",
    "model.py": "def build_model(network, batch_size, deploy):\n    return None\n",  # its own further parameters
    "trainer.py": "class SoundTrainer:\n"
    "    def to_batch(self, images, labels, uniforms):\n        return images, labels, uniforms\n"
    "    def step(self, batches, tracing=False):\n        return None\n"  # an optional extra is fine
    "    def set_learning_rate(self, learning_rate):\n        pass\n"
    "    def prepare_batch(self, batch_size):\n        pass\n"
    "    def logits(self, images):\n        return images\n"
    "    def save_checkpoint(self, folder):\n        pass\n"
    "    def load_checkpoint(self, folder):\n        pass\n"
    "    def train_state(self):\n        return None\n"
    "def build_trainer(config):\n    return SoundTrainer()\n",
    "train.py": "from algorithms.contract.types import Runtime\n"
    "def describe_runtime():\n    return Runtime('sound', 'sound', {}, 'cpu')\n"
    "def records(config):\n    return True\n"
    "def train(session):\n"
    "    session.execution_note = 'graph'\n"
    "    return {'steps': session.config.max_steps}\n"
    "def describe_modes(config, trainer):\n    return 'graph', 'fp32'\n",
    "probes.py": "def initial_loss_and_logits(network, images, labels, seed=0):\n    return 0.0, images\n"
    "def model_parameters(network):\n    return []\n"
    "def layer_outputs_and_gradients(network, weights, images, labels, on_output=None):\n    return None\n",
    "native.py": "STEPS_PER_CALL = 1\n"
    "def apply_threads(config):\n    return ''\n"
    "class Native:\n    def __init__(self, config, dataset, schedule):\n        pass\n"
    "def Harness(config, session):\n    return None\n"
    "def gemm(n, precision='fp32'):\n    return None\n"
    "def compiled_ms(config, dataset, schedule, block):\n    return {}\n"
    "def profile_ops(config, dataset, schedule, warmup):\n    return '', []\n"
    "def device_memory_mb():\n    return None\n",
    "determinism.py": "def enable():\n    return [], []\n",
}


def test_the_checker_names_each_parameter_list_that_differs_from_the_contract(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    write_package(tmp_path, "sound_wrapper", SOUND)
    assert check_wrapper("sound_wrapper", STRATEGIES, known_flags()) == []

    skewed = dict(SOUND)
    skewed["trainer.py"] = (
        SOUND["trainer.py"]
        .replace("def to_batch(self, images, labels, uniforms)", "def to_batch(self, images, uniforms)")
        .replace("def save_checkpoint(self, folder)", "def save_checkpoint(self, directory)")
        .replace("def prepare_batch(self, batch_size)", "def prepare_batch(self, shape, batch_size)")
    )
    skewed["train.py"] = SOUND["train.py"].replace("def train(session)", "def train(session, extra)")
    skewed["probes.py"] = SOUND["probes.py"].replace(
        "(network, images, labels, seed=0)", "(network, images, labels, seed)"
    )
    skewed["native.py"] = SOUND["native.py"].replace("def Harness(config, session)", "def Harness(session, config)")
    write_package(tmp_path, "skewed_wrapper", skewed)
    problems = check_wrapper("skewed_wrapper", STRATEGIES, known_flags())
    assert sorted(problems) == sorted(
        [
            "skewed_wrapper.train.train(session, extra): required parameter 'extra' the contract never passes "
            "(contract: TrainModule.train(session))",
            "skewed_wrapper.probes.initial_loss_and_logits(network, images, labels, seed): 'seed' needs a default "
            "(the shared code may leave it out) "
            "(contract: ProbesModule.initial_loss_and_logits(network, images, labels, seed=0))",
            "skewed_wrapper.native.Harness(session, config): 'config' is parameter 2, the contract's 1; "
            "'session' is parameter 1, the contract's 2 (contract: NativeModule.Harness(config, session))",
            "skewed_wrapper.trainer.SoundTrainer.to_batch(images, uniforms): no parameter 'labels' "
            "(contract: Trainer.to_batch(images, labels, uniforms))",
            "skewed_wrapper.trainer.SoundTrainer.save_checkpoint(directory): 'directory' where the contract has "
            "'folder' (contract: Trainer.save_checkpoint(folder))",
            "skewed_wrapper.trainer.SoundTrainer.prepare_batch(shape, batch_size): 'batch_size' is parameter 2, "
            "the contract's 1; required parameter 'shape' the contract never passes "
            "(contract: Trainer.prepare_batch(batch_size))",
        ]
    )


def test_the_checker_names_each_session_member_a_wrapper_uses_outside_the_contract(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    reaching = dict(SOUND)
    reaching["train.py"] = SOUND["train.py"].replace(
        "    return {'steps'", "    session._epoch_losses.clear()\n    session.csv = None\n    return {'steps'"
    )
    reaching["native.py"] = SOUND["native.py"] + (
        "class Recorder:\n    def __init__(self, session):\n        self.session = session\n"
        "    def on_step(self):\n        return self.session.step_times_ms[-1], self.session.learning_rate\n"
    )
    write_package(tmp_path, "reaching_wrapper", reaching)
    assert check_wrapper("reaching_wrapper", STRATEGIES, known_flags()) == [
        "reaching_wrapper/native.py:21: session.step_times_ms is not in the contract's WrapperSession",
        "reaching_wrapper/train.py:8: session._epoch_losses is not in the contract's WrapperSession",
        "reaching_wrapper/train.py:9: session.csv is not in the contract's WrapperSession",
    ]


def test_the_run_session_is_the_session_the_contract_names(tmp_path):
    import numpy as np

    from algorithms.config.run_config import parse_config
    from algorithms.session.run_session import RunSession
    from algorithms.dataset.data import Dataset

    config = parse_config(["--results_dir", str(tmp_path), "--quiet"], "torch_script.py", "")
    images = np.zeros((20, 28, 28), np.float32)
    dataset = Dataset(images, np.zeros(20, np.int32), images[:5], np.zeros(5, np.int32))
    session = RunSession(config, dataset, Runtime("torch", "torch", {}, "cpu"), record=False)
    assert member_problems("RunSession", session, WrapperSession) == []

    class NarrowSession:  # a session that cannot stop a run nor save one, recording fewer columns
        def __init__(self):
            self.config = self.dataset = self.run_id = self.checkpoint_root = self.resume_from = None
            self.execution_note = self.precision_note = ""
            self.signal_of_any_process = None
            self.learning_rate = 0.1

        def train_step(self, epoch, loss, accuracy, step_time_ms, data_time_ms, batch_size):
            pass

    problems = member_problems("NarrowSession", NarrowSession(), WrapperSession)
    assert "NarrowSession: no should_stop (WrapperSession)" in problems
    assert "NarrowSession: no save_checkpoint (WrapperSession)" in problems
    assert (
        "NarrowSession.train_step(epoch, loss, accuracy, step_time_ms, data_time_ms, batch_size): "
        "no parameter 'comm_time_ms'; no parameter 'worker'; no parameter 'staleness'; "
        "no parameter 'loss_scale'; no parameter 'skipped'; no parameter 'global_rows' (contract: "
        "WrapperSession.train_step(epoch, loss, accuracy, step_time_ms, data_time_ms, batch_size, "
        "comm_time_ms=None, worker=0, staleness=0, loss_scale=None, skipped=False, global_rows=None))"
    ) in problems
