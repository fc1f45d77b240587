"""What holds when the memory estimate is wrong: a process of a run that cannot be
started ends the run in one line with those started stopped (torchrun's own agent
included), and a run's ranks and workers die with the process that started them."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from algorithms.paths import REPO_ROOT
from algorithms.machine.resources import children

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
MARK = "CNN_PARALLEL_TEST_RUN"  # inherited by every process a test's run starts


# --------------------------------------------------------------------------- a process that cannot start


def limited_to(processes: int, command: list) -> list:
    """`command` under RLIMIT_NPROC = `processes` more tasks than its user has now. Root is
    exempt from the limit, so as root the command runs as nobody, keeping only the right
    to read and search every file (CAP_DAC_READ_SEARCH: the interpreter and the data)."""
    uid = os.geteuid()
    if uid != 0:
        return ["prlimit", f"--nproc={tasks_of(uid) + processes}", *command]
    assert shutil.which("setpriv") and shutil.which("prlimit"), "util-linux's setpriv and prlimit"
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    nobody += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    deadline = time.monotonic() + 10  # a previous run's processes still exiting would count
    while tasks_of(65534) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [*nobody, "prlimit", f"--nproc={tasks_of(65534) + processes}", *command]


def tasks_of(uid: int) -> int:
    """Threads of every process of `uid`: what RLIMIT_NPROC counts."""
    count = 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(status) as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields["Uid"].split()[1]) == uid:
            count += int(fields["Threads"])
    return count


def processes_marked(mark: str) -> list:
    """Live processes (zombies aside) whose environment holds MARK=`mark`: everything a
    test's run started, whatever its command line (TensorFlow's tasks name no folder)."""
    found = []
    for environ in glob.glob("/proc/[0-9]*/environ"):
        try:
            with open(environ, "rb") as handle:
                if f"{MARK}={mark}".encode() in handle.read().split(b"\0"):
                    found.append(int(environ.split("/")[2]))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return found


def writable_by_anyone(folder):
    folder.mkdir()
    folder.chmod(0o777)
    return folder


# the process that starts the cluster is its chief; the chief is made so by the command the user
# typed, in a new user namespace, which under the test's unprivileged user could not read the
# interpreter: the chief's role is taken directly (the variable its launcher sets)
CHIEF = {"CNN_PARALLEL_PS_PARENT_NETNS": os.readlink("/proc/self/ns/net")}


@pytest.mark.slow  # one of the edit loop's slowest (7 s or more): make test-fast leaves it out
@pytest.mark.parametrize(
    "script, strategy, first_line, role",
    [
        ("torch_script.py", "data", "error: torchrun started ", {}),  # torchrun's agent forks the ranks
        ("torch_script.py", "async", "error: could not start Hogwild worker ", {}),  # this process spawns them
        ("tensorflow_script.py", "ps", "error: could not start worker task ", CHIEF),  # cluster.py's tasks
    ],
    ids=["torchrun", "hogwild", "tf-cluster"],
)
def test_a_process_that_cannot_be_started_ends_the_run_in_one_line_and_leaves_none(
    script, strategy, first_line, role, small_data, tmp_path
):
    """8 devices under a limit of 8 more processes (threads count too): the launcher gets
    some way, then fork fails. Those it started are stopped, and the run says so once."""
    folder = writable_by_anyone(tmp_path / "run")
    shutil.copy(small_data / "train.csv", folder / "train.csv")  # its binary cache is written beside it
    flags = ["--train", str(folder / "train.csv"), "--test", "none", "--max_steps", "2", "--quiet"]
    flags += ["--strategy", strategy, "--devices", "8", "--results_dir", str(folder / "results")]
    flags += ["--results_log", str(folder / "results.log")]
    env = {**ENV, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", MARK: str(folder), **role}
    proc = subprocess.run(  # one thread for OpenMP and OpenBLAS: the launcher's own count stays small
        limited_to(8, [sys.executable, script, *flags]),
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 3 and len(lines) == 1 and lines[0].startswith(first_line), proc.stderr[-3000:]
    assert "a limit on processes" in lines[0] and "were stopped" in lines[0]
    deadline = time.monotonic() + 10
    while processes_marked(str(folder)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_marked(str(folder)) == []


# --------------------------------------------------------------------------- dying with the launcher


def wait_for(what, seconds: float = 180):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {seconds} s")


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["data", "async"])
def test_a_killed_launcher_takes_its_processes_with_it(strategy, small_data, tmp_path):
    """SIGKILL to the process the user started (torchrun's agent, or the process that
    records a Hogwild run): its ranks or workers end too, instead of training on alone."""
    flags = ["--train", str(small_data / "train.csv"), "--test", "none", "--num_epochs", "50", "--quiet"]
    flags += ["--strategy", strategy, "--devices", "2", "--results_dir", str(tmp_path / "results")]
    launcher = subprocess.Popen(
        [sys.executable, "torch_script.py", *flags],
        cwd=REPO_ROOT,
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: list = []
    try:
        csv_path = tmp_path / "results" / "cnn2d_3layer_fullconnected_3layer_torch.csv"
        wait_for(lambda: csv_path.exists() and csv_path.stat().st_size > 400)  # steps are being taken
        workers = [pid for pid in children(launcher.pid) if b"resource_tracker" not in cmdline_of(pid)]
        assert len(workers) == 2, [cmdline_of(pid) for pid in workers]
        launcher.kill()
        launcher.wait()
        wait_for(lambda: not any(os.path.exists(f"/proc/{pid}/cmdline") and cmdline_of(pid) for pid in workers), 20)
    finally:
        for pid in [*workers, launcher.pid]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def cmdline_of(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return b""
