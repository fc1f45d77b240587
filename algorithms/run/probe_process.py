"""One probe process (`python -m algorithms.run.probe PACKAGE --out JSON ...`) and the
JSON it wrote: the benchmark's measurements and --batch_size auto's trials both run
one, each framework in its own process. Imports no framework."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Optional

from algorithms.paths import REPO_ROOT


@dataclass(frozen=True)
class ProbeRun:
    returncode: int
    stderr: str
    result: Optional[dict]  # the probe's JSON; None when it failed before writing it


def run_probe(python: str, package: str, probe_args: list, timeout: float, env: Optional[dict] = None) -> ProbeRun:
    """The probe of wrapper `package` under `python`, from the repo root, with `env` over
    this process's environment; raises subprocess.TimeoutExpired past `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="probe-") as scratch:
        out = os.path.join(scratch, "probe.json")
        proc = subprocess.run(
            [python, "-m", "algorithms.run.probe", package, "--out", out, *probe_args],
            cwd=REPO_ROOT,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        result = None
        if proc.returncode == 0 and os.path.exists(out):
            with open(out) as handle:
                result = json.load(handle)
    return ProbeRun(proc.returncode, proc.stderr, result)
