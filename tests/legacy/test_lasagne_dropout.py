"""Lasagne's dropout takes the shared uniforms (algorithms/network/dropout.py): the layer is
the numpy mask rule bit for bit, the compiled train function takes the uniforms and the
logits function does not, the benchmark's native loop feeds them as the harness does,
and Theano's compile cache still serves a second process the whole train function."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from backends import theano_backend  # noqa: F401  (before lasagne: the bridges)

import lasagne  # noqa: E402
import theano  # noqa: E402
import theano.tensor as T  # noqa: E402

from algorithms.network.dropout import apply, layer_uniforms  # noqa: E402
from algorithms.network.networks import NETWORKS  # noqa: E402
from lasagne_wrapper.model import SharedUniformDropout, uniforms_channels_first  # noqa: E402
from tests.conftest import REPO_ROOT  # noqa: E402
from tests.helpers.flags import run_flags  # noqa: E402

NETWORK = NETWORKS["cnn2d_3layer_fullconnected_3layer"]


def with_edge_cases(u: np.ndarray, rate: float) -> np.ndarray:
    """`u` with the mask rule's edge cases in its first row: exactly the rate (dropped),
    one step above (kept), one below (dropped), 0 (dropped)."""
    rate = np.float32(rate)
    u.reshape(len(u), -1)[0, :4] = [rate, np.nextafter(rate, np.float32(1)), np.nextafter(rate, np.float32(0)), 0]
    return u


@pytest.mark.parametrize("shape", [(128,), (5, 6, 8)], ids=["dense", "map"])
def test_the_layer_is_the_mask_rule_and_the_identity_when_deterministic(shape):
    """(N, units), and an (N, H, W, C) map fed channels-first: the kept units are x times
    float32(1 / (1 - rate)), exactly as numpy's reference computes them."""
    rate, rows = 0.25, 16
    uniforms = with_edge_cases(layer_uniforms(0, 0, 7, shape, np.arange(rows)), rate)
    x = np.random.default_rng(0).standard_normal((rows, *shape)).astype(np.float32)
    expected = apply(x, uniforms, rate)
    (u_first,) = uniforms_channels_first(NETWORK, (uniforms,))  # its first Dropout follows a Dense
    x_first = np.ascontiguousarray(x.transpose(0, 3, 1, 2)) if len(shape) == 3 else x
    variable_type = T.tensor4 if len(shape) == 3 else T.matrix
    x_var, u_var = variable_type("x"), variable_type("u")
    layer = SharedUniformDropout(
        lasagne.layers.InputLayer((None, *x_first.shape[1:]), input_var=x_var),
        lasagne.layers.InputLayer((None, *x_first.shape[1:]), input_var=u_var),
        rate,
    )
    dropped = theano.function([x_var, u_var], lasagne.layers.get_output(layer))(x_first, u_first)
    if len(shape) == 3:
        dropped = dropped.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(dropped, expected)
    assert (dropped.reshape(rows, -1)[0, :4] != 0).tolist() == [False, True, False, False]
    assert 0.2 < (dropped == 0).mean() < 0.3
    deterministic = theano.function([x_var], lasagne.layers.get_output(layer, deterministic=True))(x_first)
    np.testing.assert_array_equal(deterministic, x_first)


def test_the_train_function_takes_the_uniforms_and_the_logits_function_does_not(small_data):
    """Its inputs are the images, the labels and one uniforms array per Dropout layer; a
    step on 10 rows and then on 7 (a smaller last batch) both run, and the uniforms decide
    the loss (all-dropping ones give another)."""
    from algorithms.dataset.data import load_kaggle_csv
    from algorithms.network.dropout import uniforms
    from lasagne_wrapper.trainer import LasagneTrainer

    trainer = LasagneTrainer(NETWORK, NETWORK.training.optimizer, 0)
    explicit = [put.variable.name for put in trainer._train.maker.inputs if not put.implicit]  # not the shared ones
    assert explicit == ["images", "labels", "uniforms_10", "uniforms_12"]
    assert [put.variable.name for put in trainer._logits.maker.inputs if not put.implicit] == ["images"]
    images, labels = load_kaggle_csv(str(small_data / "train.csv"), labelled=True)
    snapshot = [variable.get_value() for variable in trainer.state_variables]
    first = trainer.step([trainer.to_batch(images[:10], labels[:10], uniforms(NETWORK, 0, 0, np.arange(10)))])
    for variable, value in zip(trainer.state_variables, snapshot):
        variable.set_value(value)
    zeros = tuple(np.zeros((10, 128), np.float32) for _ in range(2))  # u = 0: every unit dropped
    all_dropped = trainer.step([trainer.to_batch(images[:10], labels[:10], zeros)])
    assert abs(first.loss - all_dropped.loss) > 1e-3
    smaller = trainer.step([trainer.to_batch(images[:7], labels[:7], uniforms(NETWORK, 0, 0, np.arange(7)))])
    assert np.isfinite(smaller.loss)


def test_lasagne_native_loop_and_harness_step_give_the_same_losses_with_dropout_on(small_data, tmp_path):
    """The benchmark's two sides feed the same uniforms (tests/test_benchmark.py's check)."""
    from algorithms.run.timing import step_schedule
    from algorithms.run.entry import prepare
    from algorithms.records import read_rows
    from algorithms.session.run_session import RunSession
    from lasagne_wrapper import native as native_module
    from lasagne_wrapper.train import describe_runtime

    config, dataset = prepare(run_flags(small_data / "train.csv", tmp_path / "results", batch_size=32), "test", "")
    session = RunSession(config, dataset, describe_runtime())
    schedule = step_schedule(session, 3)
    native = native_module.Native(config, dataset, schedule)
    native.run(schedule)
    native_module.Harness(config, session).run(schedule)
    harness_losses = [row["loss"] for row in read_rows(session.csv_path, session.run_id)]
    assert len(harness_losses) == 3 and len(set(harness_losses)) == 3
    assert [float(loss) for loss in native.losses] == pytest.approx(harness_losses, rel=1e-6)


# builds the Lasagne trainer (its train and logits functions); prints the ops of each C
# module this process compiled
COMPILED_BY_THE_TRAINER = """
from backends import theano_backend
import json
from theano.link.c.basic import CLinker
compiled = []
compile_cmodule = CLinker.compile_cmodule
def counted(self, *args, **kwargs):
    compiled.append(sorted({str(node.op) for node in self.fgraph.toposort()}))
    return compile_cmodule(self, *args, **kwargs)
CLinker.compile_cmodule = counted
from algorithms.network.networks import NETWORKS
from lasagne_wrapper.trainer import LasagneTrainer
network = NETWORKS["cnn2d_3layer_fullconnected_3layer"]
LasagneTrainer(network, network.training.optimizer, 0)
print(json.dumps(compiled))
"""


def test_a_second_process_compiles_none_of_the_train_functions_modules():
    """With the dropout ops in the graph, the trainer's modules are all cached (bridge 5,
    tests/test_theano_backend.py): a second process compiles only the constant-folding
    DimShuffle whose key holds a per-process hash, never the dropout's fused elementwise op."""
    compiled = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", COMPILED_BY_THE_TRAINER], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        compiled.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert all(len(ops) == 1 and "DimShuffle" in ops[0] for ops in compiled[1]), compiled[1]
