"""Theano for the Theano-era packages: the project's THEANO_FLAGS, then four bridges
between theano-pymc 1.1 on Python 3.11 and Lasagne 0.1 / Keras 2.3.1, one fix of
theano-pymc's compile cache and one of its convolution's threading.

Import this module before lasagne or keras (lasagne_wrapper and keras_wrapper.compat
do); `enable_determinism` is both wrappers' parity switch. Nothing installed is edited:
bridges 1-4 put an old name back where the old package looks for it, and only when it is
missing; 5 wraps one method of theano-pymc's C linker, 6 the default of one argument of its
convolution ops, in this process only.

1. theano-pymc renamed `MRG_RandomStreams` to `MRG_RandomStream` (Lasagne's dropout
   and Keras's Theano backend import the old name).
2. `theano.tensor.signal.downsample` went away in Theano 0.9; Lasagne 0.1's pooling
   layers call `downsample.max_pool_2d`, which `pool.pool_2d` still computes.
3. Python 3.10 moved `Iterable`, `Mapping`, ... out of `collections` (Keras 2.3.1).
4. Python 3.11 removed `inspect.getargspec` and `inspect.ArgSpec` (Keras 2.3.1).
5. theano-pymc's C-module cache key counts an op's `__props__` among the versions, and an
   op with no properties (Dot22, Alloc, the softmax cross-entropy ops...) has `()`, which
   the key reads as "unversioned": every such module was compiled again by every process
   (8 gcc runs, 5-6 s of a 11.5 s Lasagne run). Where that is the only reason, the key
   gets the ops' and types' real versions, so those modules are cached like the others.
6. CorrMM, theano-pymc's CPU convolution, takes its OpenMP path (the batch loop on the
   run's threads, one-thread GEMMs) without Theano's global `openmp` flag, which its
   Elemwise C code does not compile with. Measured in isolation (the default net's second
   convolution, forward and both gradients, batch 128, 2 threads): 101-136 ms -> 69-76 ms.
"""

from __future__ import annotations

import collections
import collections.abc
import inspect
import os
import sys
import types
import warnings

from backends import openblas

COLLECTIONS_ABC_NAMES = ("Iterable", "Mapping", "Sequence", "MutableMapping", "Callable")


def theano_cache_dir() -> str:
    """Where compiled Theano modules live between runs (outside results/)."""
    cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache_home, "cnn-parallel", "theano")


def project_theano_flags() -> str:
    # blas__ldflags must be set: unset, `import theano` reads numpy's BLAS config,
    # which numpy 1.23 no longer has, and crashes
    return f"floatX=float32,mode=FAST_RUN,device=cpu,blas__ldflags=-lopenblas,base_compiledir={theano_cache_dir()}"


def configure_theano_flags(environ=os.environ) -> str:
    """Set the project's THEANO_FLAGS unless the user set their own; says which."""
    if environ.get("THEANO_FLAGS"):
        return "set by the user"
    environ["THEANO_FLAGS"] = project_theano_flags()
    return "set by the project"


# lasagne 0.1 imports pkg_resources, which setuptools<81 warns about on every run
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)

# Flags are read once, when theano is first imported, so they are set before it.
THEANO_FLAGS_SOURCE = ("already imported: " if "theano" in sys.modules else "") + configure_theano_flags()

import theano  # noqa: E402
import theano.sandbox.rng_mrg  # noqa: E402
import theano.tensor.signal  # noqa: E402
from theano.tensor.signal import pool  # noqa: E402
from theano.link.c.basic import CLinker  # noqa: E402
from theano.link.c.interface import CLinkerObject  # noqa: E402


def bridge_mrg_random_streams() -> None:
    rng_mrg = theano.sandbox.rng_mrg
    if not hasattr(rng_mrg, "MRG_RandomStreams"):
        rng_mrg.MRG_RandomStreams = rng_mrg.MRG_RandomStream


def max_pool_2d(input, ds, ignore_border=None, st=None, padding=(0, 0), mode="max"):
    """Theano 0.8's `downsample.max_pool_2d`, on today's `pool.pool_2d`."""
    return pool.pool_2d(input, ws=ds, ignore_border=ignore_border, stride=st, pad=padding, mode=mode)


def bridge_downsample() -> None:
    name = "theano.tensor.signal.downsample"
    if name in sys.modules or hasattr(theano.tensor.signal, "downsample"):
        return
    downsample = types.ModuleType(
        name, "Theano 0.8's downsample module, rebuilt on pool.pool_2d by backends.theano_backend"
    )
    downsample.max_pool_2d = max_pool_2d
    sys.modules[name] = downsample
    theano.tensor.signal.downsample = downsample


def bridge_collections_abc() -> None:
    for name in COLLECTIONS_ABC_NAMES:
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))


ArgSpec = collections.namedtuple("ArgSpec", "args varargs keywords defaults")


def getargspec(func) -> ArgSpec:
    """Python 3.10's `inspect.getargspec`, from `getfullargspec`."""
    spec = inspect.getfullargspec(func)
    return ArgSpec(spec.args, spec.varargs, spec.varkw, spec.defaults)


def bridge_getargspec() -> None:
    if not hasattr(inspect, "getargspec"):
        inspect.getargspec = getargspec
    if not hasattr(inspect, "ArgSpec"):
        inspect.ArgSpec = ArgSpec


def versions_without_empty_props(linker, fgraph) -> tuple:
    """The C-module cache version of `fgraph` as theano-pymc's CLinker.cmodule_key_ builds it,
    less the ops' empty `__props__`; () if an op or type is really unversioned."""
    version = []
    for node in linker.schedule(fgraph):
        if hasattr(node.op, "c_code_cache_version_apply"):
            version.append(node.op.c_code_cache_version_apply(node))
        if getattr(node.op, "__props__", ()):
            version.append(node.op.__props__)
        for variable in (*node.inputs, *node.outputs):
            if isinstance(variable.type, CLinkerObject):
                version.append(variable.type.c_code_cache_version())
    return tuple(version) if all(version) else ()


def bridge_cache_key_versions() -> None:
    original = CLinker.cmodule_key_
    if getattr(original, "cnn_parallel_bridge", False):
        return

    def cmodule_key_(self, fgraph, *args, **kwargs):
        key = original(self, fgraph, *args, **kwargs)
        if key is None or key[0]:  # uncacheable (an unhashable constant) or already versioned
            return key
        return versions_without_empty_props(self, fgraph), key[1]

    cmodule_key_.cnn_parallel_bridge = True
    cmodule_key_.original = original
    CLinker.cmodule_key_ = cmodule_key_


def bridge_corrmm_openmp() -> None:
    """theano-pymc's CorrMM (its CPU convolution: im2col and one BLAS GEMM per image) loops
    over the batch on one thread, each small GEMM split by OpenBLAS over the cores, unless
    Theano's `openmp` flag is on, which its Elemwise C code does not compile with. The
    convolution ops alone take openmp=True here: the batch loop runs on OMP_NUM_THREADS
    threads (the run's --threads), each GEMM on one (corr_gemm.c's own OpenMP path); the
    weight gradient is summed per thread, then across threads (another order: drift).
    Its OpenMP threads wait passively (unless OMP_WAIT_POLICY is set): spinning after each
    convolution, they took the cores from OpenBLAS's threads in the dense layers and from the
    elementwise ops (Keras on Theano 225 -> 190-213 ms a step, Lasagne 171-191 -> 168-170,
    two rounds each, results/benchmark/2026-12-04-defaults.md). libgomp reads it when the
    first compiled convolution loads, after this."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from theano.tensor.nnet import corr

    original = corr.BaseCorrMM.__init__
    if getattr(original, "cnn_parallel_bridge", False):
        return
    signature = inspect.signature(original)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        if bound.arguments.get("openmp") is None:
            bound.arguments["openmp"] = True
        original(*bound.args, **bound.kwargs)

    __init__.cnn_parallel_bridge = True
    __init__.original = original
    corr.BaseCorrMM.__init__ = __init__


def describe_theano() -> str:
    """The devices line of results.log: where Theano runs, with which flags and BLAS kernels."""
    flags = os.environ.get("THEANO_FLAGS", "")
    return (
        f"{theano.config.device} (Theano mode {theano.config.mode}, floatX {theano.config.floatX}, "
        f"blas {theano.config.blas__ldflags or 'none'}, "
        f"C compiler {theano.config.cxx or 'none: Python fallback, slow'}); "
        f"THEANO_FLAGS={flags} ({THEANO_FLAGS_SOURCE}); {openblas.describe()}"
    )


def device_detail() -> str:
    """contract.Device's detail: the CPU and the OpenBLAS core Theano's GEMMs run on."""
    from algorithms.machine.devices import cpu_name

    return f"{cpu_name()} (Theano's CPU backend, {openblas.kernels()})"


def enable_determinism() -> tuple:
    """Theano's `deterministic=more`, set before any function is compiled."""
    theano.config.deterministic = "more"
    applied = ["theano.config.deterministic='more' (picks deterministic GPU ops; CPU ops already are)"]
    caveats = ["BLAS (OpenBLAS) GEMM: bit-identical only at the same thread count and CPU"]
    return applied, caveats


bridge_mrg_random_streams()
bridge_downsample()
bridge_collections_abc()
bridge_getargspec()
bridge_cache_key_versions()
bridge_corrmm_openmp()


# The spec's conventions at the kinks, which Theano's own ops do not keep. Every other
# framework here takes ReLU'(0) = 0 and sends a max-pool window's gradient to its first
# maximum (row-major) when several tie; Theano's T.nnet.relu has ReLU'(0) = 1/2 and its
# pool gradient goes to every tied maximum. The digits' background is exactly 0, so with
# zero initial biases whole windows tie at 0 and, once the biases move, at relu(bias):
# Lasagne's and Keras 2's first update differed from every other framework's by 2e-4
# (step 2) where float32 drift is 2e-6. Both wrappers build their ReLUs and pools from these.


def relu(x):
    """ReLU with the gradient 0 at 0: x * (x > 0) differentiates to (x > 0)."""
    return x * (x > 0)


def max_pool(x, size: int):
    """Max-pooling of NCHW `x` over size x size windows, stride `size`, a partial last window
    dropped (the spec's floor mode), whose gradient goes to each window's first maximum
    (row-major), as every other framework's: the window's strided views in row-major order,
    each taken only where it is greater than the maximum so far (a tie keeps the earlier).
    Views and one fused elementwise op: the reshapes of a one-hot formulation copied the
    input twice (32 ms of Lasagne's 353 ms step; with this, 214 ms)."""
    import theano.tensor as T

    rows, columns = x.shape[2] // size, x.shape[3] // size
    best = None
    for i in range(size):
        for j in range(size):
            value = x[:, :, i : rows * size : size, j : columns * size : size]
            best = value if best is None else T.switch(T.gt(value, best), value, best)
    return best
