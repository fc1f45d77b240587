"""Every entry script's --help: read before any framework loads (so it and a refused flag
answer at once, without the frameworks' start-up notices), one default per flag, and
only the strategies and --fault kinds its own framework runs."""

from __future__ import annotations

import importlib
import re
import subprocess

import pytest

from algorithms.machine.devices import machine_gpus
from algorithms.registry.capabilities import environment
from algorithms.registry.frameworks import FRAMEWORKS, Framework
from algorithms.config.flags import FLAGS
from algorithms.config.parser import build_parser
from algorithms.config.run_config import OPTIONAL_FLAGS, help_scope
from algorithms.paths import REPO_ROOT
from algorithms.network.parallel import STRATEGIES
from algorithms.network.variants import BARE_KINDS, TRAINING_KINDS
from tests.conftest import framework_param, run_module, script_env

FRAMEWORK_MODULES = ("tensorflow", "keras", "torch", "jax", "theano", "lasagne", "caffe")

# the script run as `python SCRIPT ARGS` would, then the framework modules it loaded
LOADED_AFTER = """
import runpy, sys
sys.argv = [{script!r}, *{args!r}]
try:
    runpy.run_path({script!r}, run_name="__main__")
except SystemExit as stop:
    code = stop.code
print("status", code, "loaded", ",".join(m for m in {modules!r} if m in sys.modules) or "none")
"""

# every script: keras_tensorflow_backend.py beside the registry's (which runs Keras on tensorflow
# through keras_script.py), each with the environment its framework runs in
KERAS_TENSORFLOW_BACKEND = Framework(
    "keras_tensorflow", "keras_tensorflow_backend.py", {}, "keras", "tensorflow", "keras_wrapper", "main"
)
SCRIPTS = [pytest.param(*framework_param(f).values, marks=framework_param(f).marks, id=f.name) for f in FRAMEWORKS]
SCRIPTS.append(pytest.param(KERAS_TENSORFLOW_BACKEND, id="keras_tensorflow_backend.py"))
MAIN_ENV = [pytest.param(f, id=f.name) for f in FRAMEWORKS if f.venv == "main" and f.name != "caffe"]


def support_of(framework: Framework):
    with environment(framework.env):
        return importlib.import_module(framework.package).supported()


def run_in_place(framework: Framework, args: list) -> subprocess.CompletedProcess:
    """The entry script under its framework's Python (the legacy ones: .venv-legacy's, where
    they would re-execute themselves), in one process whose loaded modules are then listed."""
    code = LOADED_AFTER.format(script=framework.script, args=args, modules=FRAMEWORK_MODULES)
    return subprocess.run(
        [framework.python, "-c", code],
        cwd=REPO_ROOT,
        env=script_env(framework.env),
        capture_output=True,
        text=True,
        timeout=300,
    )


def refused_flags(framework: Framework) -> list:
    """A strategy the framework does not run, or else an optional flag it does not have."""
    support = support_of(framework)
    strategy = next((s for s in STRATEGIES if s not in support.strategies), None)
    if strategy:
        return ["--strategy", strategy, "--devices", "2"]
    flag = next(flag for flag in OPTIONAL_FLAGS if flag not in support.flags)
    return flag.split()


@pytest.mark.parametrize("framework", SCRIPTS)
def test_help_and_a_refusal_come_before_any_framework_loads(framework):
    helped = run_in_place(framework, ["--help"])
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr[-2000:]
    assert helped.stdout.strip().endswith("status 0 loaded none"), helped.stdout[-300:]
    refused = run_in_place(framework, refused_flags(framework))
    assert refused.returncode == 0 and refused.stderr.startswith("error: "), refused.stderr[-2000:]
    assert refused.stdout.strip().endswith("status 2 loaded none"), refused.stdout[-300:] + refused.stderr[-300:]
    assert "oneDNN" not in helped.stderr + refused.stderr and "absl" not in helped.stderr + refused.stderr


@pytest.mark.parametrize("framework", SCRIPTS)
def test_device_gpu_without_a_gpu_is_one_line_before_any_framework_loads(framework):
    """No GPU here: every entry script refuses --device gpu with status 2 in one line, no
    traceback, naming why (the machine has none; Theano's and Caffe's CPU-only builds)."""
    if machine_gpus():
        pytest.skip("this machine has a GPU")
    refused = run_in_place(framework, ["--device", "gpu", "--max_steps", "1"])
    error = refused.stderr.strip()
    assert refused.stdout.strip().endswith("status 2 loaded none"), refused.stdout[-300:] + refused.stderr[-300:]
    assert error.startswith("error: --device gpu: ") and "\n" not in error and "Traceback" not in error, error
    gpu_capable = "--device gpu" in support_of(framework).flags
    assert ("no NVIDIA GPU on this machine" if gpu_capable else "runs on the CPU") in error, error


def option_blocks(help_text: str) -> list:
    """(--flag, its whole help text) of every option, in order, as argparse lays it out (a
    study's --help lists its own flags, then the entry scripts': a flag may come twice)."""
    blocks = []
    for line in help_text.splitlines():
        match = re.match(r"  (--\w+)", line)
        if match:
            blocks.append((match.group(1), line))
        elif blocks and line.startswith("      "):
            blocks[-1] = (blocks[-1][0], blocks[-1][1] + " " + line.strip())
    return blocks


def assert_one_default_each(help_text: str) -> None:
    for flag, text in option_blocks(help_text):
        assert len(re.findall(r"\(default\b|\bDefault:", text)) <= 1 and "(default: None)" not in text, text


@pytest.mark.parametrize("framework", MAIN_ENV)
def test_help_says_each_default_once_and_only_the_strategies_and_faults_the_script_runs(framework):
    helped = run_in_place(framework, ["--help"])
    blocks = dict(option_blocks(helped.stdout))
    assert "--strategy" in blocks and "--fault" in blocks, helped.stdout[-2000:]
    assert_one_default_each(helped.stdout)
    support = support_of(framework)
    usage = re.search(r"--strategy \{([\w,]+)\}", helped.stdout).group(1).split(",")
    assert usage == [s for s in STRATEGIES if s in support.strategies]
    strategy_help = blocks["--strategy"]
    for strategy in STRATEGIES:
        assert (f"{strategy}:" in strategy_help) == (strategy in support.strategies), strategy_help
    if len(support.strategies) < len(STRATEGIES):
        assert "algorithms.registry.capabilities" in strategy_help
    fault_help = blocks["--fault"]
    for kind in TRAINING_KINDS:  # each kind named, with its syntax (or what it does) where this script puts it in
        runs = f"--fault {kind}" not in OPTIONAL_FLAGS or f"--fault {kind}" in support.flags
        syntax = f"{kind} (" if kind in BARE_KINDS else f"{kind}:"
        assert kind in fault_help and (syntax in fault_help) == runs, (kind, fault_help)
    if "ps" not in support.strategies:  # a strategy's own flags go with it
        assert "--ps_tasks" not in blocks and "--ps_sync" not in blocks


def offered_choices(block: str) -> tuple:
    """The choices an option's --help line offers (`--device {auto,cpu}`), or ()."""
    match = re.match(r"\s*--\w+ \{([\w,]+)\}", block)
    return tuple(match.group(1).split(",")) if match else ()


def offered_problems(help_text: str, support) -> list:
    """Where a script's --help offers an optional flag or value (OPTIONAL_FLAGS) its
    wrapper does not run, or leaves out one it does; the flags that go with one (FLAGS'
    `follows`) with it. The --fault kinds: the test above."""
    blocks = dict(option_blocks(help_text))
    runs = {flag: flag in support.flags for flag in OPTIONAL_FLAGS if not flag.startswith("--fault ")}
    runs["--execution compiled"] = "--compile" in support.flags  # --compile is --execution compiled
    problems = []
    for optional, runs_it in runs.items():
        name, _, value = optional.partition(" ")
        strategy = next(shared.strategy for shared in FLAGS if name in shared.names)
        runs_it = runs_it and (not strategy or strategy in support.strategies)
        if not value:
            shown = name in blocks
        else:
            shown = value in offered_choices(blocks.get(name, ""))
            if not runs_it and f"{value}:" in blocks.get(name, ""):
                problems.append(f"{name}'s help explains {value}, which this script refuses")
        if shown != runs_it:
            problems.append(f"{optional}: {'offered' if shown else 'not offered'}, {'runs' if runs_it else 'refused'}")
    for shared in FLAGS:
        if shared.follows and (shared.names[0] in blocks) != (shared.follows in support.flags):
            problems.append(f"{shared.names[0]} goes with {shared.follows}, listed apart from it")
    return problems


def test_every_frameworks_help_lists_only_the_optional_flags_and_values_it_runs():
    """All eight, from the parser each entry script builds for its wrapper's Support
    (no framework, legacy env or pycaffe needed): Lasagne offered --compile and
    --execution eager|compiled, which it always refuses."""
    for framework in FRAMEWORKS:
        support = support_of(framework)
        text = build_parser(framework.script, "", help_scope(support)).format_help()
        assert not offered_problems(text, support), (framework.name, offered_problems(text, support))


@pytest.mark.parametrize("framework", SCRIPTS)
def test_each_scripts_own_help_lists_only_the_optional_flags_and_values_it_runs(framework):
    helped = run_in_place(framework, ["--help"])
    assert helped.returncode == 0 and "usage:" in helped.stdout, helped.stderr[-2000:]
    assert not offered_problems(helped.stdout, support_of(framework)), helped.stdout[-3000:]


def test_a_study_says_each_default_once_too():
    proc = run_module("algorithms.studies.batch_study", ["--help"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert_one_default_each(proc.stdout)
