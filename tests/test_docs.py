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
FENCE = re.compile(r"^[ \t]*```([^\n]*)\n(.*?)^[ \t]*```", re.M | re.S)  # a fence may be indented in a list item


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


def runs_caffe(command: str) -> bool:
    """Whether a shown run_all.py (or make compare) runs Caffe: no --only, or one naming it."""
    words = shlex.split(command, comments=True)
    if not any(word.endswith("run_all.py") for word in words) and words[:2] != ["make", "compare"]:
        return False
    only = next((words[i + 1] for i, word in enumerate(words[:-1]) if word == "--only"), None)
    only = next((word.split("=", 1)[1] for word in words if word.startswith("--only=")), only)
    return only is None or "caffe" in only.split(",")


def section_lines(doc: str, line: int) -> str:
    """The section of `doc` (from the heading above `line` to the next one) holding `line`;
    a code block's `# comment` lines are no headings."""
    with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as handle:
        text = handle.read()
    blanked = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text).splitlines()
    headings = [number for number, content in enumerate(blanked, start=1) if re.match(r"#{1,6} ", content)]
    start = max([number for number in headings if number <= line], default=1)
    end = min([number for number in headings if number > line], default=len(blanked) + 1)
    return "\n".join(text.splitlines()[start - 1 : end - 1])


def test_a_page_that_shows_run_all_running_caffe_says_it_needs_make_caffe():
    """own-network.md's run_all.py commands ran Caffe, whose build (`make caffe`, 8-11
    minutes) the page did not name: every section showing such a command names it."""
    silent = [
        f"{doc}:{line}"
        for doc in COMMAND_DOCS
        for line, command in shown_commands(doc)
        if runs_caffe(command) and "make caffe" not in section_lines(doc, line)
    ]
    assert not silent, "run_all.py runs Caffe here, and the section does not say it needs `make caffe`: " + ", ".join(
        silent
    )


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


# --------------------------------------------------------------------------- the glossary

GLOSSARY = "docs/glossary.md"
# each glossary heading's anchor -> the words that use it in a page (case aside); a longer
# term's words are left out of a shorter one's (drift in "drift envelope", seed regime in
# "same-seed regime")
TERMS = {
    "spec": r"\bspec\b",
    "wrapper": r"\bwrappers?\b",
    "preset": r"\bpresets?\b",
    "main-command": r"\bmain command\b",
    "global-batch": r"\bglobal batch(es)?\b",
    "settings-record": r"\bsettings records?\b",
    "init-row": r"\binit rows?\b",
    "shared-dropout-uniforms": r"\b(shared|dropout) uniforms\b",
    "parity-mode": r"\bparity\b",
    "drift": r"\bdrift\b(?! envelopes?\b)",
    "drift-envelope": r"\benvelopes?\b",
    "horizon": r"\bhorizons?\b",
    "epoch-check": r"\bepoch checks?\b",
    "same-seed-regime": r"\bsame-seed\b",
    "seed-regime": r"(?<!same-)\bseed regimes?\b",
    "seed-band": r"\bseed bands?\b",
    "yardstick": r"\byardsticks?\b",
    "verdict": r"\bverdicts?\b",
    "shipped-baselines": r"\bbaselines?\b",
}
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")


def masked(text: str) -> str:
    """`text` with what is no prose blanked, positions kept: code blocks, inline code,
    headings and link targets (a word there is no use of it)."""
    blank = lambda match: re.sub(r"[^\n]", " ", match.group(0))  # noqa: E731
    text = FENCE.sub(blank, text)
    text = re.sub(r"`[^`]+`", blank, text)  # inline code may run over a line's end
    text = re.sub(r"^#{1,6} .*$", blank, text, flags=re.M)
    return LINK.sub(lambda m: m.group(0)[: m.start(2) - m.start(0)] + " " * len(m.group(2)) + ")", text)


def first_uses(doc: str) -> dict:
    """anchor -> (line, the words, the link target they sit in or None) of each term's first use."""
    with open(os.path.join(REPO_ROOT, doc), encoding="utf-8") as handle:
        text = handle.read()
    prose = masked(text)
    outside_code = FENCE.sub(lambda block: " " * len(block.group(0)), text)
    links = [(m.start(1), m.end(1), m.group(2)) for m in LINK.finditer(outside_code)]
    uses = {}
    for anchor, pattern in TERMS.items():
        match = re.search(pattern, prose, re.I)
        if match:
            target = next((t for start, end, t in links if start <= match.start() and match.end() <= end), None)
            uses[anchor] = (text.count("\n", 0, match.start()) + 1, match.group(0), target)
    return uses


def test_the_glossary_defines_every_term_the_pages_must_link():
    assert set(TERMS) == anchors(os.path.join(REPO_ROOT, GLOSSARY)) - {"glossary"}


@pytest.mark.parametrize("doc", [doc for doc in COMMAND_DOCS if doc != GLOSSARY])
def test_each_page_links_the_first_use_of_each_term_to_the_glossary(doc):
    glossary = os.path.relpath(os.path.join(REPO_ROOT, GLOSSARY), os.path.dirname(os.path.join(REPO_ROOT, doc)))
    unlinked = [
        f"{doc}:{line} {words!r} (link it to {glossary}#{anchor})"
        for anchor, (line, words, target) in first_uses(doc).items()
        if target != f"{glossary}#{anchor}"
    ]
    assert not unlinked, "first uses of the glossary's terms without their link: " + "; ".join(unlinked)
