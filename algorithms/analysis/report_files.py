"""Where a comparison's report is written, so that no comparison replaces another's.

A report's name is its first run's id and a key of every run it compares, in order
(`results/compare/<first run id>-<key>.{png,html}`): the full `make compare` report and a
later two-run comparison that starts from the same run get two files. The page carries
its key; a file that holds another comparison (or none: another tool's PNG) is never
written over, and `--out` naming one is refused with one line.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Optional

from algorithms.errors import InputError

KEY_META = "cnn-parallel-comparison"
KEY_CHARS = 12  # 48 bits: two comparisons of one results folder never share a name in practice
_KEY_PATTERN = re.compile(r'<meta name="' + KEY_META + r'" content="([0-9a-f]+)"')
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def comparison_key(runs: list) -> str:
    """The runs compared, in order (a report is read against its first run)."""
    identities = "\n".join(f"{os.path.abspath(run.path)}@{run.run_id}" for run in runs)
    return hashlib.sha256(identities.encode()).hexdigest()[:KEY_CHARS]


def default_prefix(folder: str, runs: list) -> str:
    """`folder`/<first run id>-<key>: a run id is free text, its unsafe characters become _."""
    return os.path.join(folder, f"{_UNSAFE.sub('_', runs[0].run_id)[:80]}-{comparison_key(runs)}")


def held_key(html_path: str) -> Optional[str]:
    """The key of the comparison a page holds, or None (not a page of this tool's)."""
    with open(html_path, errors="replace") as handle:
        match = _KEY_PATTERN.search(handle.read(4096))
    return match.group(1) if match else None


def check_free(prefix: str, key: str) -> None:
    """Raises InputError when `prefix`.html or .png is another comparison's, or another file."""
    html_path, png_path = prefix + ".html", prefix + ".png"
    if os.path.exists(html_path):
        held = held_key(html_path)
        if held != key:
            holds = f"comparison {held}" if held else "a file this tool did not write"
            raise InputError(
                f"{html_path} holds {holds}, not this one ({key}); give another --out, or remove it to replace it"
            )
    elif os.path.exists(png_path):
        raise InputError(f"{png_path} exists and is no comparison's plot; give another --out")


def localisation_png(results_dir: str, run_id: str) -> Optional[str]:
    """The per-layer localisation heatmap of `run_id` (results/localise/<run_id>.png) when there is one."""
    path = os.path.join(results_dir, "localise", f"{run_id}.png")
    return path if os.path.isfile(path) else None
