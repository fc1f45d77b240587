"""The memory footprints the resource check reads (each wrapper's Support.footprint),
measured: runs a command and reports the peak resident memory (VmHWM) of every
process it starts, from /proc, while they run.

    python -m algorithms.bench.footprint -- .venv/bin/python torch_script.py --strategy data --devices 2 --max_steps 5

prints one line per process (peak MB, pid, command), largest first, and the tree's
largest total. Run a strategy at two device counts to read a per-device cost off the
difference (docs/parallel.md#memory-before-anything-starts)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from typing import Optional

from algorithms.errors import EXIT_FAILED
from algorithms.machine.resources import descendants

SAMPLE_EVERY_S = 0.05


def _status_kb(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _command(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()


def measure(command: list, env: Optional[dict] = None, quiet: bool = False) -> tuple:
    """Runs `command` (in `env`; its output dropped if `quiet`); returns ({pid: (peak MB,
    command line)}, the tree's largest total RSS MB, exit status)."""
    output = subprocess.DEVNULL if quiet else None
    proc = subprocess.Popen(command, env=env, stdout=output, stderr=output)
    peaks_kb: dict = {}  # pid -> (peak kB, command line)
    largest_total_kb = 0
    while proc.poll() is None:
        total_kb = 0
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                peak_kb, resident_kb, line = _status_kb(pid, "VmHWM"), _status_kb(pid, "VmRSS"), _command(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # it ended between the listing and the read
            total_kb += resident_kb
            peaks_kb[pid] = (max(peak_kb, peaks_kb.get(pid, (0, ""))[0]), line or peaks_kb.get(pid, (0, ""))[1])
        largest_total_kb = max(largest_total_kb, total_kb)
        time.sleep(SAMPLE_EVERY_S)
    peaks = {pid: (peak_kb / 1024, line) for pid, (peak_kb, line) in peaks_kb.items()}
    return peaks, largest_total_kb / 1024, proc.returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m algorithms.bench.footprint",
        description="Peak resident memory (VmHWM) of every process a command starts.",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to measure after --")
    peaks, largest_total_mb, status = measure(command)
    for pid, (peak_mb, line) in sorted(peaks.items(), key=lambda item: -item[1][0]):
        print(f"{peak_mb:8.0f} MB  pid {pid:<7} {line[:150]}")
    print(f"{largest_total_mb:8.0f} MB  all of them at once (largest sum of resident memory); exit status {status}")
    return 0 if status == 0 else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
