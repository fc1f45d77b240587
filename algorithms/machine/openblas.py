"""OpenBLAS's kernels for this CPU, named before the library loads.

A DYNAMIC_ARCH OpenBLAS picks its kernels (its "core") once, as it loads, from the CPU's
family and model. A CPU newer than the library's table gets an older core: Debian 12's
OpenBLAS 0.3.21, which Theano links and Caffe is built with, took an Intel Xeon with AMX
for a Prescott (SSE3 kernels from 2004, SGEMM at a fifth of its Cooperlake kernels), and
the numpy 1.23 wheel's 0.3.20 takes an AMD Zen 4 for a Zen (AVX2). OPENBLAS_CORETYPE, set
before it loads, names the core instead.

So before a framework that links OpenBLAS loads, `name_best_core(library)` asks a child
process which core the library picks by itself and which cores it was built with (its
`gotoblas_<CORE>` symbols), and where the pick is older than the best core of that list
this CPU's flags (/proc/cpuinfo) can run, sets OPENBLAS_CORETYPE to it. The choice itself
is `core_to_name`, a function of the flags, the pick and the list alone. A user's own
OPENBLAS_CORETYPE wins. Which core ran is read back from the loaded library
(`Library.loaded`), for the run's device detail and results.log.

`python -m algorithms.machine.openblas` prints the SGEMM GFLOP/s of that library, as a run
would load it, beside the main env's numpy BLAS, measured in turn in one process.
Imports no framework."""

from __future__ import annotations

from algorithms.errors import EXIT_FAILED
import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Mapping, Optional

# the library `-lopenblas` resolves to on Debian (libopenblas-dev): what Theano's
# blas__ldflags and Caffe's build link, found at run time by its soname
SYSTEM_OPENBLAS = "libopenblas.so.0"
CORETYPE = "OPENBLAS_CORETYPE"

# OpenBLAS's x86 cores (its corename() spelling, which OPENBLAS_CORETYPE takes in any case),
# ranked by the instructions their kernels use: a higher rank runs faster kernels
RANKS = {
    **dict.fromkeys(("katmai", "coppermine", "northwood", "banias", "athlon"), 0),  # before SSE3
    **dict.fromkeys(("prescott", "opteron", "opteron_sse3"), 1),  # SSE3
    **dict.fromkeys(("core2", "penryn", "dunnington", "atom", "nano", "barcelona", "bobcat"), 2),  # SSSE3 / SSE4a
    "nehalem": 3,  # SSE4.2
    **dict.fromkeys(("sandybridge", "bulldozer"), 4),  # AVX
    **dict.fromkeys(("piledriver", "steamroller", "excavator"), 5),  # AVX with FMA
    **dict.fromkeys(("haswell", "zen"), 6),  # AVX2 with FMA
    "skylakex": 7,  # AVX-512
    "cooperlake": 8,  # AVX-512 with AVX512_BF16
    "sapphirerapids": 9,  # AVX-512 with AMX
}
AVX512 = frozenset({"avx512f", "avx512vl", "avx512bw", "avx512dq", "avx2", "fma"})
# the cores this module names, best first, each with the /proc/cpuinfo flags its kernels
# need (what OpenBLAS's own support_* checks test, and the AVX-512 subsets SkylakeX's use)
NAMEABLE = (
    ("SapphireRapids", AVX512 | {"avx512_bf16", "amx_tile", "amx_bf16"}),
    ("Cooperlake", AVX512 | {"avx512_bf16"}),
    ("SkylakeX", AVX512),
    ("Haswell", frozenset({"avx2", "fma"})),
    ("Sandybridge", frozenset({"avx"})),
    ("Nehalem", frozenset({"sse4_2"})),
    ("Core2", frozenset({"ssse3"})),
    ("Prescott", frozenset({"pni"})),  # Linux's name for SSE3
)


def rank(core: str) -> Optional[int]:
    return RANKS.get(core.lower())


def best_core(flags: set, library_cores) -> Optional[str]:
    """The best core of `library_cores` (a library's list, any case) whose kernels a CPU
    with these /proc/cpuinfo flags runs; None where there is none."""
    built = {core.lower() for core in library_cores}
    return next((core for core, needs in NAMEABLE if core.lower() in built and needs <= flags), None)


def core_to_name(picked: str, flags: Optional[set], library_cores) -> Optional[str]:
    """The core to name in OPENBLAS_CORETYPE: the best the library has for this CPU, where
    the library's own pick is older; None where the pick is as good (a Zen beside a Haswell:
    the same AVX2 kernels), unknown here, or the CPU's flags cannot be read."""
    best = best_core(flags, library_cores) if flags is not None else None
    if best is None or rank(picked) is None:
        return None
    return best if rank(best) > rank(picked) else None


@dataclass(frozen=True)
class Library:
    """An OpenBLAS as a process loaded it."""

    path: str  # the file, resolved
    version: str  # "0.3.21"
    core: str  # the core it runs (its corename())
    cores: tuple = ()  # the cores it has kernels for; () where it was built for one (no DYNAMIC_ARCH)

    def describe(self) -> str:
        return f"OpenBLAS {self.version} {self.core} kernels"

    @staticmethod
    def loaded(name: str) -> Optional["Library"]:
        """The library `name` as this process has it (loading it now if the framework has not
        yet: the same file and core the framework's own loading will get); None if absent."""
        try:
            return Library(**_read(ctypes.CDLL(name)))
        except OSError:
            return None


# every known core's symbol; a DYNAMIC_ARCH build exports gotoblas_<CORE> for each it has
_CORE_SYMBOLS = tuple(core.upper() for core in RANKS)
# the prefixes and suffixes OpenBLAS builds give their functions (scipy-openblas, 64-bit ints)
_NAMINGS = (("", ""), ("", "64_"), ("scipy_", ""), ("scipy_", "64_"))


def _read(lib) -> dict:
    for prefix, suffix in _NAMINGS:
        corename = getattr(lib, f"{prefix}openblas_get_corename{suffix}", None)
        config = getattr(lib, f"{prefix}openblas_get_config{suffix}", None)
        if corename is not None and config is not None:
            break
    else:
        raise OSError("not an OpenBLAS (no openblas_get_corename)")
    corename.restype = config.restype = ctypes.c_char_p
    words = config().decode().split()  # "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ..."
    cores = tuple(core for core in _CORE_SYMBOLS if hasattr(lib, f"gotoblas_{core}")) if "DYNAMIC_ARCH" in words else ()
    return {
        "path": _mapped_file(ctypes.cast(corename, ctypes.c_void_p).value),
        "version": words[1] if len(words) > 1 else "?",
        "core": corename().decode(),
        "cores": cores,
    }


def _mapped_file(address: int) -> str:
    """The file mapped at `address` in this process (/proc/self/maps), or "?"."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split()
                low, high = (int(value, 16) for value in fields[0].split("-"))
                if low <= address < high and len(fields) >= 6:
                    return os.path.realpath(fields[5])
    except OSError:
        pass
    return "?"


def probe(name: str, environ: Mapping[str, str] = os.environ) -> Optional[Library]:
    """The core library `name` picks by itself (OPENBLAS_CORETYPE unset) and the cores it has,
    read in a child process (a library reads OPENBLAS_CORETYPE once, as it loads, so this
    process must not load it first); None where it cannot be loaded."""
    env = {key: value for key, value in environ.items() if key not in (CORETYPE, "OPENBLAS_VERBOSE")}
    env["OPENBLAS_NUM_THREADS"] = "1"  # no thread pool for a look
    code = (
        "import json, sys; from algorithms.machine.openblas import Library; "
        "library = Library.loaded(sys.argv[1]); print(json.dumps(library and library.__dict__))"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        child = subprocess.run(
            [sys.executable, "-I", "-S", "-c", f"import sys; sys.path.insert(0, {root!r}); {code}", name],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        found = json.loads(child.stdout) if child.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return Library(**{**found, "cores": tuple(found["cores"])}) if found else None


@dataclass(frozen=True)
class Choice:
    coretype: Optional[str]  # what OPENBLAS_CORETYPE is set to here (None: nothing set)
    why: str  # for results.log


def choose(environ: Mapping[str, str], flags: Optional[set], library: Optional[Library]) -> Choice:
    """What to set, from the environment, the CPU's flags and the library's own pick (probe)."""
    if environ.get(CORETYPE):
        return Choice(None, f"{CORETYPE}={environ[CORETYPE]}, set by the user")
    if library is None:
        return Choice(None, "no OpenBLAS found to check")
    if not library.cores:
        return Choice(None, f"{library.version} is built for {library.core} alone (no DYNAMIC_ARCH)")
    if flags is None:
        return Choice(None, f"OpenBLAS's own pick, {library.core} (no /proc/cpuinfo to check it against)")
    named = core_to_name(library.core, flags, library.cores)
    if named:
        return Choice(named, f"{CORETYPE}={named}, set by the project: OpenBLAS took this CPU for a {library.core}")
    best = best_core(flags, library.cores)
    if best and rank(best) == rank(library.core):
        return Choice(None, f"OpenBLAS's own pick, {library.core}: the best it has kernels for on this CPU")
    return Choice(None, f"OpenBLAS's own pick, {library.core}")


def name_best_core(name: str, environ=os.environ, flags: Optional[set] = None) -> Choice:
    """Before the library `name` loads: set OPENBLAS_CORETYPE where its own pick is older
    than the best core it has for this CPU (`flags`: the CPU's, read from /proc/cpuinfo
    when not given). A user's OPENBLAS_CORETYPE is kept, and nothing is probed then."""
    from algorithms.machine.tuning import cpu_flags

    if environ.get(CORETYPE):
        return choose(environ, flags, None)
    choice = choose(environ, cpu_flags() if flags is None else flags, probe(name, environ))
    if choice.coretype:
        environ[CORETYPE] = choice.coretype
    return choice


# 1024²: 2.1 GFLOP a product, a few ms each on a quiet 2-core machine and still a second or
# two when other work shares it (the benchmark's 2048² took 16 s at load average 13 here)
GEMM_SIZE = 1024
ROW_MAJOR, NO_TRANSPOSE = 101, 111  # cblas.h


def sgemm_gflops(name: str, threads: int, rounds: int = 5, size: int = GEMM_SIZE) -> dict:
    """Median SGEMM GFLOP/s of the library `name` (its core named as a run would name it)
    and of numpy's own BLAS, measured in turn in this process (the two see the same load,
    so their ratio holds on a busy machine where either number alone does not)."""
    import numpy as np

    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[variable] = str(threads)
    choice = name_best_core(name)
    library = Library.loaded(name)
    if library is None:
        raise OSError(f"{name} cannot be loaded")
    sgemm = _sgemm(ctypes.CDLL(name))
    rng = np.random.default_rng(0)
    a, b = (rng.random((size, size), dtype=np.float32) for _ in range(2))
    out = np.empty((size, size), np.float32)

    def library_gemm():
        sgemm(ROW_MAJOR, NO_TRANSPOSE, NO_TRANSPOSE, size, size, size, 1.0, a, size, b, size, 0.0, out, size)

    def numpy_gemm():
        np.matmul(a, b, out=out)

    seconds = {"library": [], "numpy": []}
    for round_ in range(rounds + 1):  # the first round warms both (thread pools, pages)
        for which, gemm in (("library", library_gemm), ("numpy", numpy_gemm)):
            started = time.perf_counter()
            gemm()
            if round_:
                seconds[which].append(time.perf_counter() - started)
    flop = 2.0 * size**3
    numpy_blas = _numpy_blas()
    return {
        "library": library.__dict__ | {"why": choice.why},
        "numpy": numpy_blas,
        "library_gflops": flop / statistics.median(seconds["library"]) / 1e9,
        "numpy_gflops": flop / statistics.median(seconds["numpy"]) / 1e9,
        "threads": threads,
        "size": size,
    }


def _sgemm(lib):
    import numpy as np

    matrix = np.ctypeslib.ndpointer(np.float32, flags="C_CONTIGUOUS")
    sgemm = lib.cblas_sgemm
    integer, number = ctypes.c_int, ctypes.c_float
    sgemm.argtypes = [integer] * 6 + [number, matrix, integer, matrix, integer, number, matrix, integer]
    sgemm.restype = None
    return sgemm


def _numpy_blas() -> dict:
    """numpy's own OpenBLAS (a wheel bundles one), as this process loaded it."""
    import glob

    import numpy as np

    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*.so*"))):
        library = Library.loaded(path)
        if library is not None:
            return library.__dict__
    return {"path": "?", "version": "?", "core": "numpy's BLAS", "cores": ()}


def gemm_line(measured: dict, who: str) -> str:
    """One line for a command's start: the library's SGEMM beside the main env's."""
    library, numpy_blas = measured["library"], measured["numpy"]
    ratio = measured["library_gflops"] / measured["numpy_gflops"]
    return (
        f"BLAS of {who}: OpenBLAS {library['version']}, {library['core']} kernels ({library['why']}): SGEMM "
        f"{measured['library_gflops']:.0f} GFLOP/s, {ratio:.2f}x the main env's numpy (OpenBLAS "
        f"{numpy_blas['version']} {numpy_blas['core']}, {measured['numpy_gflops']:.0f} GFLOP/s); "
        f"{measured['size']}² on {measured['threads']} threads, in turn in one process"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algorithms.machine.openblas",
        description="The system OpenBLAS's core as a run would name it, and its SGEMM GFLOP/s beside numpy's.",
    )
    parser.add_argument("--library", default=SYSTEM_OPENBLAS, help=f"the library (default {SYSTEM_OPENBLAS})")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="BLAS threads (default: the cores)")
    parser.add_argument("--who", default="Theano and Caffe", help="who links it, for the line")
    parser.add_argument("--json", action="store_true", help="print the measurement as JSON")
    args = parser.parse_args(argv)
    try:
        measured = sgemm_gflops(args.library, args.threads)
    except OSError as error:
        print(f"BLAS: {args.library} not measured ({error})")
        return EXIT_FAILED
    print(json.dumps(measured) if args.json else gemm_line(measured, args.who))
    return 0


if __name__ == "__main__":
    sys.exit(main())
