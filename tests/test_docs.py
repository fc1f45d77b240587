"""The documentation is held to the code: every command shown in a code block of
README.md and docs/*.md still runs (`--help` of its entry script or module, `make -n`
of its target), the README stays a five-minute page, and every relative link points
to a file (and heading) that exists."""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from algorithms.paths import LEGACY_PYTHON, REPO_ROOT

README_MAX_LINES = 200
COMMAND_DOCS = [
    "README.md",
    *sorted(os.path.relpath(p, REPO_ROOT) for p in glob.glob(os.path.join(REPO_ROOT, "docs", "*.md"))),
]
LINKED_DOCS = [
    *COMMAND_DOCS,
    "results/README.md",
    *sorted(os.path.relpath(p, REPO_ROOT) for p in glob.glob(os.path.join(REPO_ROOT, "results", "benchmark", "*.md"))),
]
# code blocks of these languages hold no commands (the layout, THEANO_FLAGS' value, a network file, Python)
NOT_COMMANDS = {"text", "toml", "python"}
# scripts that re-execute themselves in .venv-legacy: their --help is checked with its Python
LEGACY_SCRIPTS = {"lasagne_script.py", "keras_theano_backend.py"}
# Commands that cannot be checked by --help: how each is checked instead
NOT_BY_HELP = {
    "algorithms.registry.capabilities": "takes no flags and prints the capability table: run as shown, "
    "it must print the table (test_suite checks README holds it)"
}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.M | re.S)


def shown_commands(doc: str) -> list:
    """(line number, command line) of every command in the fenced code blocks of `doc`,
    continuation lines joined."""
    with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as handle:
        text = handle.read()
    commands = []
    for block in FENCE.finditer(text):
        if block.group(1).strip() in NOT_COMMANDS:
            continue
        first_line = text.count("\n", 0, block.start(2)) + 1
        pending, start = "", None
        for offset, line in enumerate(block.group(2).splitlines()):
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            start = first_line + offset if not pending else start
            pending += line.rstrip().removesuffix("\\") + " "
            if not line.rstrip().endswith("\\"):
                commands.append((start, pending.strip()))
                pending = ""
    return commands


def check_of(command: str) -> tuple:
    """What to run to check a shown command: ("run", interpreter, argv, env),
    ("make", target) per target, or ("unknown",)."""
    words = shlex.split(command, comments=True)
    env = {}
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    program, args = words[0], words[1:]
    if program == "make":
        return tuple(("make", word) for word in args if not word.startswith("-") and "=" not in word) or (
            ("make", "all"),
        )
    if program == "bash":
        return (("run", "bash", (args[0], "--help"), env),)
    if program == "sbatch":  # a batch script, after sbatch's own flags
        return (("run", "bash", (next(arg for arg in args if arg.endswith(".sh")), "--help"), env),)
    if os.path.basename(program) == "tensorboard":  # .venv/bin/tensorboard: the main env's TensorBoard
        return (("run", "main", ("-m", "tensorboard.main", "--help"), env),)
    if program == "torchrun":
        program, args = "python", ["-m", "torch.distributed.run", *args]
    if program not in ("python", "python3", ".venv/bin/python", ".venv-legacy/bin/python"):
        return (("unknown",),)
    interpreter = "legacy" if program.startswith(".venv-legacy") else "main"
    if args[:2] == ["-m", "torch.distributed.run"]:  # the checked program is the script torchrun starts
        args = [next(arg for arg in args if arg.endswith(".py"))]
    if args[0] == "-m":
        if args[1] in NOT_BY_HELP:
            return (("run", interpreter, ("-m", args[1]), env),)
        return (("run", interpreter, ("-m", args[1], "--help"), env),)
    script = args[0]
    if script in LEGACY_SCRIPTS or (script == "keras_script.py" and env.get("KERAS_BACKEND") == "theano"):
        interpreter = "legacy"
    return (("run", interpreter, (script, "--help"), env),)


def all_checks() -> dict:
    """check -> the places ("doc:line") that show a command needing it."""
    checks = {}
    for doc in COMMAND_DOCS:
        for line, command in shown_commands(doc):
            for check in check_of(command):
                key = check if check[0] != "run" else check[:3] + (tuple(sorted(check[3].items())),)
                if check == ("unknown",):
                    key = ("unknown", command)
                checks.setdefault(key, []).append(f"{doc}:{line}")
    return checks


CHECKS = all_checks()
RUN_CHECKS = sorted(key for key in CHECKS if key[0] == "run")
MAKE_TARGETS = sorted({key[1] for key in CHECKS if key[0] == "make"})


def skip_reason(check: tuple):
    interpreter = check[1]
    if interpreter == "legacy" and not os.path.exists(LEGACY_PYTHON):
        return f"{LEGACY_PYTHON} is missing (`make legacy-setup` builds it; CI has it)"
    return None


def check_param(check: tuple):
    """caffe_script.py needs pycaffe before it parses flags: its check is marked caffe."""
    return pytest.param(check, marks=[pytest.mark.caffe] * (check[2][0] == "caffe_script.py"))


def run_check(check: tuple) -> subprocess.CompletedProcess:
    interpreter, argv, env = check[1:]
    executable = {"main": sys.executable, "legacy": LEGACY_PYTHON, "bash": "bash"}[interpreter]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **dict(env)}
    return subprocess.run(
        [executable, *argv], cwd=REPO_ROOT, env=environment, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="module")
def help_outputs(request):
    """Every runnable check a selected test needs (-m "not caffe" leaves caffe_script.py's
    out), run once, four at a time (each is a Python start-up)."""
    selected = {
        item.callspec.params["check"]
        for item in request.session.items
        if hasattr(item, "callspec") and "check" in item.callspec.params
    }
    runnable = [check for check in RUN_CHECKS if check in selected and skip_reason(check) is None]
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(runnable, pool.map(run_check, runnable)))


def test_the_docs_show_commands_and_every_one_is_known():
    assert len(RUN_CHECKS) >= 10 and "compare" in MAKE_TARGETS and "test" in MAKE_TARGETS
    unknown = [f"{', '.join(places)}: {key[1]}" for key, places in CHECKS.items() if key[0] == "unknown"]
    assert not unknown, "commands this test cannot check; teach check_of or list them: " + "; ".join(unknown)


@pytest.mark.parametrize(
    "check", [check_param(check) for check in RUN_CHECKS], ids=lambda check: f"{CHECKS[check][0]} {' '.join(check[2])}"
)
def test_a_shown_command_runs(check, help_outputs):
    reason = skip_reason(check)
    if reason:
        pytest.skip(reason)
    proc = help_outputs[check]
    where = ", ".join(CHECKS[check])
    assert proc.returncode == 0, f"{where}: {' '.join(check[2])} exited {proc.returncode}: {proc.stderr[-2000:]}"
    if check[2][-1] == "--help":
        assert "usage" in proc.stdout.lower(), f"{where}: {' '.join(check[2])} printed no usage"
    else:  # NOT_BY_HELP: the capability table
        assert proc.stdout.startswith("| framework |"), f"{where}: {' '.join(check[2])}: {proc.stdout[:200]}"


@pytest.mark.parametrize("target", MAKE_TARGETS)
def test_a_shown_make_target_exists(target):
    proc = subprocess.run(
        ["make", "--no-print-directory", "-C", REPO_ROOT, "-n", target], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, f"{', '.join(CHECKS[('make', target)])}: make -n {target}: {proc.stderr[-1000:]}"


def test_the_readme_is_a_five_minute_page():
    with open(os.path.join(REPO_ROOT, "README.md"), encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: str) -> set:
    with open(path, encoding="utf-8") as handle:
        text = FENCE.sub("", handle.read())
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        name = slug(heading)
        found.add(name if name not in seen else f"{name}-{seen[name]}")
        seen[name] = seen.get(name, 0) + 1
    return found


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_every_relative_link_points_to_an_existing_file_and_heading(doc):
    path = os.path.join(REPO_ROOT, doc)
    with open(path, encoding="utf-8") as handle:
        text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", handle.read()))
    broken = []
    for target in re.findall(r"\[[^\]]*\]\(([^)\s]+)\)", text):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(linked):
            broken.append(f"{target}: no such file")
        elif anchor and linked.endswith(".md") and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor")
    assert not broken, f"{doc}: " + "; ".join(broken)
