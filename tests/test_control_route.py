"""One direction of control in a run (docs/architecture.md#one-direction-of-control): the
loop drives, the session answers. A real torch run's train(session), followed by
tests/helpers/control_route.py, comes back to a module it had left no more often than
measured when the rule was written, so a change that makes the loop and the session call
each other again fails here, with the route to read."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from algorithms.paths import REPO_ROOT
from tests.helpers.control_route import Route, project_module

# measured with this test's command, as with the defaults (docs/architecture.md: 174 before the rule,
# 151 after it, 152 with the step check's memory guard asking machine/resources.py for the room, 150 on
# 2026-12-08 with each epoch's steps read once before train)
TORCH_RETURNS_AT_MOST = 150


def test_code_without_a_file_is_no_stop_of_the_route():
    """`<frozen os>` and a dataclass's generated `__init__` (`<string>`) are not the project's."""
    assert project_module("<frozen os>") is None and project_module("<string>") is None
    assert project_module(os.path.join(REPO_ROOT, "algorithms", "run", "loop.py")) == "algorithms/run/loop.py"


def test_a_stay_is_consecutive_stops_in_one_module():
    route = Route("train.py")
    route.stops = ["a.py", "b.py", "b.py", "a.py", "c.py", "a.py"]
    assert route.stays() == ["a.py", "b.py", "a.py", "c.py", "a.py"]


@pytest.mark.slow
def test_a_torch_run_comes_back_to_a_module_no_more_often_than_measured(tmp_path):
    command = [sys.executable, "-m", "tests.helpers.control_route", "torch_script.py", "--max_steps", "5"]
    command += ["--yardstick", "off", "--results_dir", str(tmp_path)]  # a fresh yardstick would be measured first
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    route = "\n".join(result["route"])
    assert result["returns"] <= TORCH_RETURNS_AT_MOST, f"{result['returns']} returns; the route:\n{route}"
