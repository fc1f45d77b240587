"""backends/theano_backend.py: the project's THEANO_FLAGS (a user's are kept),
each of the four bridges, exercised through the Lasagne / Keras code that needs it, the
compile cache's fix (bridge 5) and the convolution's OpenMP loop (bridge 6)."""

import collections
import collections.abc
import inspect
import json
import os
import subprocess
import sys

import numpy as np

os.environ["KERAS_BACKEND"] = "theano"  # before keras_wrapper.compat imports keras

from backends import theano_backend  # noqa: E402  (before lasagne and keras)

import keras  # noqa: E402
import lasagne  # noqa: E402
import theano  # noqa: E402
import theano.tensor as T  # noqa: E402

from tests.conftest import REPO_ROOT  # noqa: E402

PRINT_CONFIG = (
    "from backends import theano_backend; import json, theano; c = theano.config; "
    "print(json.dumps([c.floatX, c.mode, c.device, c.blas__ldflags, c.base_compiledir, "
    "theano_backend.describe_theano()]))"
)


def _theano_config(env_changes: dict) -> list:
    env = {key: value for key, value in os.environ.items() if key != "THEANO_FLAGS"}
    env.update(env_changes)
    proc = subprocess.run(
        [sys.executable, "-c", PRINT_CONFIG], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_project_sets_theano_flags_and_keeps_a_users_own(tmp_path):
    floatx, mode, device, blas, compiledir, described = _theano_config({})
    assert (floatx, mode, device, blas) == ("float32", "FAST_RUN", "cpu", "-lopenblas")
    assert compiledir == theano_backend.theano_cache_dir() and "results" not in compiledir
    assert "set by the project" in described and "THEANO_FLAGS=floatX=float32,mode=FAST_RUN" in described

    users = f"floatX=float32,mode=FAST_RUN,device=cpu,blas__ldflags=,base_compiledir={tmp_path}"
    floatx, mode, device, blas, compiledir, described = _theano_config({"THEANO_FLAGS": users})
    assert (blas, compiledir) == ("", str(tmp_path))
    assert f"THEANO_FLAGS={users} (set by the user)" in described


def test_without_the_bridges_lasagne_and_keras_do_not_import():
    """Proves the bridges are needed (and so that the tests below can fail)."""
    for code in ("import theano, lasagne.layers", "import theano, keras"):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            env={**os.environ, "THEANO_FLAGS": theano_backend.project_theano_flags()},
            timeout=300,
        )
        assert proc.returncode != 0 and ("ImportError" in proc.stderr or "AttributeError" in proc.stderr), code


def test_bridge_1_mrg_random_streams_drives_lasagne_dropout():
    from theano.sandbox.rng_mrg import MRG_RandomStream, MRG_RandomStreams

    assert MRG_RandomStreams is MRG_RandomStream
    images = T.matrix("images")
    dropout = lasagne.layers.DropoutLayer(lasagne.layers.InputLayer((None, 1000), input_var=images), p=0.25)
    out = theano.function([images], lasagne.layers.get_output(dropout))(np.ones((4, 1000), np.float32))
    kept = out != 0
    assert 0.65 < kept.mean() < 0.85  # p=0.25 dropped
    np.testing.assert_allclose(out[kept], 1 / 0.75, rtol=1e-6)  # survivors rescaled


def test_bridge_2_downsample_max_pool_matches_numpy():
    from theano.tensor.signal import downsample

    assert downsample.max_pool_2d is theano_backend.max_pool_2d
    images = T.tensor4("images")
    pool = lasagne.layers.MaxPool2DLayer(lasagne.layers.InputLayer((None, 3, 6, 8), input_var=images), 2)
    data = np.random.default_rng(0).standard_normal((2, 3, 6, 8)).astype(np.float32)
    got = theano.function([images], lasagne.layers.get_output(pool))(data)
    np.testing.assert_array_equal(got, data.reshape(2, 3, 3, 2, 4, 2).max(axis=(3, 5)))


def test_bridge_3_collections_abc_names_let_keras_compile():
    for name in theano_backend.COLLECTIONS_ABC_NAMES:
        assert getattr(collections, name) is getattr(collections.abc, name)
    model = keras.Sequential([keras.layers.Dense(3, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")  # reaches collections.Mapping in training_utils
    assert model.predict(np.ones((2, 4), np.float32)).shape == (2, 3)


def test_bridge_4_getargspec_answers_like_python_3_10():
    def fn(a, b=1, *rest, **options):
        return a

    expected = (["a", "b"], "rest", "options", (1,))
    assert tuple(inspect.getargspec(fn)) == expected
    spec = keras.utils.generic_utils.getargspec(fn)  # builds an inspect.ArgSpec
    assert isinstance(spec, inspect.ArgSpec) and spec.keywords == "options" and tuple(spec) == expected


# a softmax classifier's training function (Dot22, Alloc and the cross-entropy ops: no
# properties); prints the ops without properties in each C module this process compiled
COMPILED_WITHOUT_PROPS = """
from backends import theano_backend
import json, numpy as np, theano, theano.tensor as T
from theano.link.c.basic import CLinker
compiled = []
compile_cmodule = CLinker.compile_cmodule
def counted(self, *args, **kwargs):
    compiled.extend(type(node.op).__name__ for node in self.fgraph.toposort() if node.op.__props__ == ())
    return compile_cmodule(self, *args, **kwargs)
CLinker.compile_cmodule = counted
x, y = T.matrix("x"), T.ivector("y")
w = theano.shared(np.zeros((4, 3), np.float32))
loss = T.nnet.categorical_crossentropy(T.nnet.softmax(T.dot(x, w)), y).mean()
theano.function([x, y], loss, updates=[(w, w - 0.1 * T.grad(loss, w))])
print(json.dumps(compiled))
"""


def test_bridge_5_a_second_process_compiles_no_module_the_first_compiled():
    """theano-pymc read an op's empty __props__ as "unversioned": Dot22's module and the
    others were compiled again by every process (their key is still unversioned by the
    original method). With the bridge a second process compiles none of them. (Theano
    still compiles a constant-folding module in each: its key holds a per-process hash.)"""
    from theano.link.c.basic import CLinker

    x = T.matrix("x")
    fgraph = theano.function([x], T.dot(x, x.T)).maker.fgraph
    assert any(type(node.op).__name__ == "Dot22" and node.op.__props__ == () for node in fgraph.toposort())
    linker = CLinker().accept(fgraph)
    assert linker.cmodule_key()[0], "the bridged key is versioned"
    assert CLinker.cmodule_key_.original(linker, fgraph, linker.no_recycling)[0] == (), "theano-pymc's is not"

    compiled = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, "-c", COMPILED_WITHOUT_PROPS], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        compiled.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert compiled[1] == [], compiled


def test_keras_runs_on_the_theano_backend():
    from keras_wrapper import compat

    assert keras.__version__ == "2.3.1" and keras.backend.backend() == "theano" == compat.BACKEND


def test_the_spec_conventions_at_the_kinks_relu_gradient_0_at_0_and_a_tied_windows_to_its_first_maximum():
    """Theano's own relu has gradient 1/2 at 0 and its pool sends a tied window's gradient to
    every maximum; every other framework takes 0 and the first maximum (row-major)."""
    x = T.tensor4("x")
    pooled = theano_backend.max_pool(x, 2)
    run = theano.function(
        [x], [pooled, T.grad(pooled.sum(), x), T.grad(theano_backend.relu(x).sum(), x), T.grad(T.nnet.relu(x).sum(), x)]
    )
    values = np.zeros((1, 1, 5, 5), np.float32)  # four all-zero windows (the fifth row and column are cut)
    values[0, 0, 0, 0] = values[0, 0, 0, 1] = 1.0  # a tie at the first window's maximum
    out, pool_grad, relu_grad, theano_relu_grad = run(values)
    assert out.shape == (1, 1, 2, 2) and out[0, 0, 0, 0] == 1.0
    expected = np.zeros((5, 5), np.float32)
    expected[0, 0] = expected[0, 2] = expected[2, 0] = expected[2, 2] = 1.0  # each window's first maximum
    assert np.array_equal(pool_grad[0, 0], expected)
    assert relu_grad[0, 0, 4, 4] == 0.0 and theano_relu_grad[0, 0, 4, 4] == 0.5  # at 0
    data = np.random.default_rng(0).standard_normal((2, 3, 7, 6)).astype(np.float32)
    assert np.array_equal(run(data)[0], data[:, :, :6, :6].reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5)))


def test_bridge_6_the_convolution_runs_its_openmp_batch_loop_with_the_same_results():
    """CorrMM takes openmp=True unless told otherwise (Theano's global flag stays off); its
    output and input gradient equal the one-thread loop's bit for bit, and its weight gradient
    (summed per thread, then across threads) to float32 rounding."""
    from theano.tensor.nnet import corr

    assert theano.config.openmp is False and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert corr.CorrMM().openmp is True and corr.CorrMM(openmp=False).openmp is False
    assert corr.CorrMM_gradWeights("valid").openmp is True

    x, w = T.tensor4("x"), T.tensor4("w")

    def compiled(openmp):
        out = corr.CorrMM(openmp=openmp)(x, w)
        cost = (out * out).sum()
        return theano.function([x, w], [out, *T.grad(cost, [x, w])])

    rng = np.random.default_rng(0)
    images = rng.standard_normal((16, 8, 12, 12)).astype(np.float32)
    kernel = rng.standard_normal((6, 8, 3, 3)).astype(np.float32)
    threaded, serial = compiled(True)(images, kernel), compiled(False)(images, kernel)
    assert np.array_equal(threaded[0], serial[0]) and np.array_equal(threaded[1], serial[1])
    np.testing.assert_allclose(threaded[2], serial[2], rtol=1e-5, atol=1e-4)
