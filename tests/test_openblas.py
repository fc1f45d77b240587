"""OpenBLAS's core for this CPU (algorithms/machine/openblas.py, backends/openblas.py):
which core is named, from /proc/cpuinfo's flags and a library's own pick and core list,
for the CPU kinds the benchmark has met (AVX2 only, AVX-512, AVX-512 with AVX512_BF16,
AVX-512 with AMX); a user's OPENBLAS_CORETYPE wins; the real system library is read
back in a child process with the core named; the legacy wrappers and Caffe name it
before their framework loads; and the SGEMM line `make compare` prints.
tests/legacy/test_openblas_legacy.py runs Theano on it and reads back the core it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from algorithms.machine import openblas
from algorithms.machine.openblas import SYSTEM_OPENBLAS, Library, best_core, choose, core_to_name
from algorithms.machine.tuning import cpu_flags, flags_in
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import FRAMEWORKS, get
from backends import openblas as backend_openblas
from tests.conftest import REPO_ROOT, run_script
from tests.helpers.flags import run_flags

BASE = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx"
SSE = "pni pclmulqdq ssse3 cx16 sse4_1 sse4_2 popcnt aes xsave"
AVX2 = "avx f16c rdrand fma bmi1 avx2 bmi2"
AVX512 = "avx512f avx512dq avx512cd avx512bw avx512vl"
# the first `flags` line of /proc/cpuinfo on each kind of CPU (the AVX-512 + AVX512_BF16
# one is this project's AMD EPYC Zen 4; the AMX one the Intel Xeon)
CPUINFO = {
    "avx2": f"processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: {BASE} {SSE} {AVX2} sse4a\n",
    "avx512": f"processor\t: 0\nmodel name\t: Intel Xeon Gold 6148\nflags\t\t: {BASE} {SSE} {AVX2} {AVX512}\n",
    "avx512_bf16": f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {BASE} {SSE} {AVX2} {AVX512} "
    "avx512ifma avx512vbmi avx512_vbmi2 avx512_vnni avx512_bf16\n",
    "amx": f"processor\t: 0\nmodel name\t: Intel Xeon Platinum 8481C\nflags\t\t: {BASE} {SSE} {AVX2} {AVX512} "
    "avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8\n",
}
FLAGS = {kind: flags_in(text) for kind, text in CPUINFO.items()}

# the cores each library was built with, as its gotoblas_<CORE> symbols list them
DEBIAN_0_3_21 = (  # Debian 12's libopenblas0-pthread, which Theano and Caffe link
    *("KATMAI", "COPPERMINE", "NORTHWOOD", "BANIAS", "ATHLON", "PRESCOTT", "OPTERON", "OPTERON_SSE3", "CORE2"),
    *("PENRYN", "DUNNINGTON", "ATOM", "NANO", "BARCELONA", "BOBCAT", "NEHALEM", "SANDYBRIDGE", "BULLDOZER"),
    *("PILEDRIVER", "STEAMROLLER", "EXCAVATOR", "HASWELL", "ZEN", "SKYLAKEX", "COOPERLAKE"),
)
WITH_SAPPHIRE_RAPIDS = (*DEBIAN_0_3_21, "SAPPHIRERAPIDS")  # 0.3.22 and later
SCIPY_OPENBLAS = ("PRESCOTT", "NEHALEM", "SANDYBRIDGE", "HASWELL", "SKYLAKEX")  # the scipy-openblas wheels' list

# (CPU kind, the library's own pick, its cores) -> the core named (None: the pick stays)
CASES = [
    ("avx2", "Prescott", DEBIAN_0_3_21, "Haswell"),
    ("avx2", "Haswell", DEBIAN_0_3_21, None),
    ("avx2", "Zen", DEBIAN_0_3_21, None),  # AMD's name for the same AVX2 kernels
    ("avx512", "Haswell", DEBIAN_0_3_21, "SkylakeX"),
    ("avx512", "SkylakeX", DEBIAN_0_3_21, None),
    ("avx512", "Prescott", SCIPY_OPENBLAS, "SkylakeX"),
    ("avx512_bf16", "Zen", DEBIAN_0_3_21, "Cooperlake"),  # numpy 1.23's 0.3.20 on this Zen 4
    ("avx512_bf16", "Haswell", SCIPY_OPENBLAS, "SkylakeX"),  # the best that list has
    ("avx512_bf16", "Cooperlake", DEBIAN_0_3_21, None),  # Debian's 0.3.21 on this Zen 4
    ("avx512_bf16", "SkylakeX", SCIPY_OPENBLAS, None),
    ("amx", "Prescott", DEBIAN_0_3_21, "Cooperlake"),  # the Xeon: 0.3.21 has no SapphireRapids
    ("amx", "Prescott", WITH_SAPPHIRE_RAPIDS, "SapphireRapids"),
    ("amx", "SkylakeX", SCIPY_OPENBLAS, None),
    ("amx", "Cooperlake", WITH_SAPPHIRE_RAPIDS, "SapphireRapids"),
]


@pytest.mark.parametrize("kind, picked, cores, named", CASES)
def test_the_core_named_for_each_kind_of_cpu(kind, picked, cores, named):
    assert core_to_name(picked, FLAGS[kind], cores) == named


def test_no_core_the_cpu_cannot_run_is_ever_named():
    """AVX-512 kernels on a CPU without AVX-512 stop the process (an illegal instruction)."""
    for kind, flags in FLAGS.items():
        best = best_core(flags, WITH_SAPPHIRE_RAPIDS)
        assert (
            best
            == {
                "avx2": "Haswell",
                "avx512": "SkylakeX",
                "avx512_bf16": "Cooperlake",
                "amx": "SapphireRapids",
            }[kind]
        )
    assert best_core(FLAGS["avx512"] - {"avx512bw"}, DEBIAN_0_3_21) == "Haswell"
    assert best_core(FLAGS["amx"] - {"amx_tile"}, WITH_SAPPHIRE_RAPIDS) == "Cooperlake"


def test_nothing_is_named_without_the_cpus_flags_a_core_list_or_a_known_pick():
    assert core_to_name("Prescott", None, DEBIAN_0_3_21) is None  # no /proc/cpuinfo
    assert core_to_name("Prescott", FLAGS["amx"], ()) is None  # built for one core
    assert core_to_name("ARMV8", FLAGS["amx"], DEBIAN_0_3_21) is None  # a core this table does not rank
    assert core_to_name("Prescott", set(), DEBIAN_0_3_21) is None  # flags that run no core named here


def library(core: str, cores=DEBIAN_0_3_21) -> Library:
    return Library("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblasp-r0.3.21.so", "0.3.21", core, cores)


def test_a_users_coretype_wins_and_every_choice_says_why():
    amx = FLAGS["amx"]
    assert choose({"OPENBLAS_CORETYPE": "Haswell"}, amx, library("Prescott")) == openblas.Choice(
        None, "OPENBLAS_CORETYPE=Haswell, set by the user"
    )
    assert choose({}, amx, library("Prescott")) == openblas.Choice(
        "Cooperlake", "OPENBLAS_CORETYPE=Cooperlake, set by the project: OpenBLAS took this CPU for a Prescott"
    )
    assert choose({}, amx, library("Cooperlake")).why == (
        "OpenBLAS's own pick, Cooperlake: the best it has kernels for on this CPU"
    )
    assert choose({}, amx, library("SkylakeX", ())).why == "0.3.21 is built for SkylakeX alone (no DYNAMIC_ARCH)"
    assert choose({}, None, library("Prescott")).why == (
        "OpenBLAS's own pick, Prescott (no /proc/cpuinfo to check it against)"
    )
    assert choose({}, amx, None) == openblas.Choice(None, "no OpenBLAS found to check")


def test_a_users_coretype_is_kept_and_nothing_is_probed(monkeypatch):
    monkeypatch.setattr(openblas, "probe", lambda *args: pytest.fail("probed with the user's OPENBLAS_CORETYPE set"))
    environ = {"OPENBLAS_CORETYPE": "Haswell"}
    assert openblas.name_best_core(SYSTEM_OPENBLAS, environ, FLAGS["amx"]).coretype is None
    assert environ == {"OPENBLAS_CORETYPE": "Haswell"}


def test_the_system_library_is_probed_in_a_child_process():
    """Debian's libopenblas (libopenblas-dev, which the legacy env's build installs): its own
    pick, its version and its cores, read without loading it here."""
    before = loaded_openblas()  # another test in this worker may have loaded it on purpose
    found = openblas.probe(SYSTEM_OPENBLAS)
    assert found is not None and found.version.startswith("0.3.") and found.path.endswith(".so")
    assert found.core.upper() in found.cores and "PRESCOTT" in found.cores
    assert loaded_openblas() == before, "the probe loaded it here"


def loaded_openblas() -> set:
    """The libopenblas files mapped into this process."""
    with open("/proc/self/maps") as maps:
        return {line.split()[-1] for line in maps if "libopenblas" in line}


def read_back(environ: dict) -> Library:
    """The system library loaded in a fresh process with `environ`: the core it runs."""
    code = (
        "import json; from algorithms.machine.openblas import Library as L; print(json.dumps(L.loaded('%s').__dict__))"
    )
    child = subprocess.run(
        [sys.executable, "-c", code % SYSTEM_OPENBLAS],
        cwd=REPO_ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    found = json.loads(child.stdout)
    return Library(**{**found, "cores": tuple(found["cores"])})


def test_where_the_pick_is_older_the_named_core_is_the_one_the_library_runs(monkeypatch):
    """As on the issue's AMX Xeon, where Debian's OpenBLAS took the CPU for a Prescott: the
    probe's answer is that one (this CPU's own pick is not older), the rest is real: this
    CPU's flags, the library's cores, and the core it runs once loaded with the named one."""
    real = openblas.probe(SYSTEM_OPENBLAS)
    monkeypatch.setattr(openblas, "probe", lambda *args: Library(real.path, real.version, "Prescott", real.cores))
    environ = {key: value for key, value in os.environ.items() if key != "OPENBLAS_CORETYPE"}
    choice = openblas.name_best_core(SYSTEM_OPENBLAS, environ)
    best = best_core(cpu_flags(), real.cores)
    assert choice.coretype == best and environ["OPENBLAS_CORETYPE"] == best
    assert read_back(environ).core.lower() == best.lower()


def test_a_users_coretype_is_the_core_the_library_runs():
    environ = {**os.environ, "OPENBLAS_CORETYPE": "Prescott"}
    assert read_back(environ).core == "Prescott"


def test_the_frameworks_on_the_system_openblas_name_its_core_before_they_load():
    on_it = {framework.name for framework in FRAMEWORKS if framework.openblas}
    assert on_it == {"lasagne", "keras_theano", "caffe"}
    for name in on_it:
        assert support(get(name)).thread_environment is backend_openblas.environment, name


def test_the_compare_line_measures_the_library_beside_numpy():
    child = subprocess.run(
        [sys.executable, "-m", "algorithms.machine.openblas", "--threads", "1", "--json"],
        cwd=REPO_ROOT,
        env={key: value for key, value in os.environ.items() if key != "OPENBLAS_CORETYPE"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    measured = json.loads(child.stdout)
    assert measured["library_gflops"] > 0.5 and measured["numpy_gflops"] > 0.5
    assert measured["library"]["path"] == openblas.probe(SYSTEM_OPENBLAS).path
    assert measured["numpy"]["path"] != measured["library"]["path"] and measured["threads"] == 1
    line = openblas.gemm_line(measured, "Theano and Caffe")
    assert line.startswith(f"BLAS of Theano and Caffe: OpenBLAS {measured['library']['version']}, ")
    assert "x the main env's numpy (OpenBLAS" in line


@pytest.mark.slow
@pytest.mark.caffe
def test_a_caffe_run_records_the_core_it_ran_and_a_users_choice(small_data, tmp_path):
    """Caffe's _caffe.so links the same libopenblas.so.0: the core read back is the one it ran."""
    system = openblas.probe(SYSTEM_OPENBLAS)
    expected = choose({}, cpu_flags(), system).coretype or system.core
    for core, why in (
        (None, "OpenBLAS's own pick" if expected == system.core else "set by the project"),
        ("Prescott", "OPENBLAS_CORETYPE=Prescott, set by the user"),
    ):
        results = tmp_path / (core or "default")
        proc = run_script(
            "caffe_script.py",
            run_flags(small_data / "train.csv", results, batch_size=32, max_steps=1),
            {"OPENBLAS_CORETYPE": core or ""},  # empty: unset, as OpenBLAS and the project read it
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        log = (tmp_path / "results.log").read_text().split("\ndevice:")[-1]
        assert f"OpenBLAS {system.version} {core or expected} kernels" in log.splitlines()[0]
        assert why in log


def test_run_all_prints_the_line_only_for_frameworks_on_the_system_openblas():
    from algorithms.studies.suite import blas_lines

    assert blas_lines(["torch", "keras_jax"], 1) == []
    lines = blas_lines(["torch", "lasagne", "caffe"], 1)
    assert lines[0].startswith("BLAS of lasagne and caffe: OpenBLAS ") and "GFLOP/s" in " ".join(lines)
