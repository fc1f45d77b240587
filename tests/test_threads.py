"""The thread environment every framework loads under (algorithms/machine/threads.py), and
what a framework reads of the thread count besides, set through its wrapper's Support
(Support.thread_environment: XLA's flags for one thread, backends/xla.py), never by the
neutral code itself."""

from __future__ import annotations

import os

from algorithms.machine.threads import THREAD_VARIABLES, set_thread_environment
from algorithms.registry.capabilities import support
from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import run_python

READS_XLA = {"tensorflow", "keras_tensorflow", "keras_jax"}


def test_one_thread_reaches_xla_only_through_the_support_of_a_framework_that_reads_it(monkeypatch):
    for framework in FRAMEWORKS:
        for name in (*THREAD_VARIABLES, "XLA_FLAGS"):
            monkeypatch.delenv(name, raising=False)
        text = set_thread_environment(1, support(framework).thread_environment)
        assert text == " ".join(f"{name}=1" for name in THREAD_VARIABLES)
        assert all(os.environ[name] == "1" for name in THREAD_VARIABLES)
        flags = os.environ.get("XLA_FLAGS", "")
        assert ("--xla_cpu_multi_thread_eigen=false" in flags) == (framework.name in READS_XLA), framework.name


def test_xlas_thread_flags_are_set_once_for_one_thread_and_not_at_all_for_more(monkeypatch):
    # Keras on tensorflow's: XLA's thread flags alone (Keras on jax's adds its CPU default, test_tuned.py)
    switches = support(next(f for f in FRAMEWORKS if f.name == "keras_tensorflow")).thread_environment
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    set_thread_environment(2, switches)
    assert os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    set_thread_environment(1, switches)
    set_thread_environment(1, switches)
    assert os.environ["XLA_FLAGS"] == ("--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false")


def test_jax_reads_every_flag_its_one_thread_and_devices_set(monkeypatch):
    """A real jax process under the flags Keras on jax's one-thread run on 2 devices sets:
    every token starts with `--`, since XLA stops reading XLA_FLAGS at one that does not
    (`intra_op_parallelism_threads=1` once hid the device count and YNNPACK's switch)."""
    from backends.jax_backend import host_devices

    monkeypatch.setenv("XLA_FLAGS", "")
    set_thread_environment(1, support(next(f for f in FRAMEWORKS if f.name == "keras_jax")).thread_environment)
    assert host_devices(2) is None
    flags = os.environ["XLA_FLAGS"].split()
    assert all(token.startswith("--") for token in flags) and flags[-1] == "--xla_force_host_platform_device_count=2"
    proc = run_python(["-c", "import jax; print(jax.device_count(), jax.devices()[0].platform)"])
    assert proc.returncode == 0 and proc.stdout.split() == ["2", "cpu"], proc.stderr[-1500:]
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    assert host_devices(2) == 4 and os.environ["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
