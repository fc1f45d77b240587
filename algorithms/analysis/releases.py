"""The releases two runs were made with, as the comparison says them: each run's settings
record holds `releases` ({distribution or library: version}, session/settings_record.py),
and a pair whose releases differ names them before its verdict, whatever made the pair:

    keras 3.14.0 -> 3.15.1 (torch backend): beyond drift at step 2

Releases are a drift source, like the threads (settings.THREADS_AND_KERNELS): they never
stop a verdict, the line only says them. Only what both runs name is compared (torch
beside Keras on torch share torch and numpy, not keras); a run without the record (an older
file) names none."""

from __future__ import annotations

from typing import Optional

# the framework's own distribution first, then its backend's, then what they compute with
_FIRST = ("keras", "tensorflow", "torch", "jax", "jaxlib", "numpy")


def releases_of(run) -> dict:
    """{name: version} of a run (analysis.runs.Run); {} for a run without the record."""
    recorded = run.settings.get("releases") if run.settings is not None else None
    return dict(recorded) if isinstance(recorded, dict) else {}


def release_changes(a, b) -> list:
    """(name, a's version, b's version) of every release both runs name that differs, the
    framework's own first."""
    mine, theirs = releases_of(a), releases_of(b)
    names = [name for name in mine if name in theirs and mine[name] != theirs[name]]
    order = {name: index for index, name in enumerate(_FIRST)}
    return [(name, mine[name], theirs[name]) for name in sorted(names, key=lambda n: order.get(n, len(_FIRST)))]


def changes_text(a, b) -> Optional[str]:
    """`keras 3.14.0 -> 3.15.1 (torch backend)`, or None where the runs name the same releases.
    The backend is said where the framework is not its own backend (Keras)."""
    changes = release_changes(a, b)
    if not changes:
        return None
    text = ", ".join(f"{name} {mine} -> {theirs}" for name, mine, theirs in changes)
    framework, backend = a.backend_key[0], a.backend_key[1]
    if b.backend_key[:2] == (framework, backend) and backend != framework:
        text += f" ({backend} backend)"
    return text


def verdict_line(a, b, verdict_text: str) -> str:
    """The pair's verdict as one line: its releases' changes first, where they differ."""
    changes = changes_text(a, b)
    return verdict_text if changes is None else f"{changes}: {verdict_text}"


def releases_text(run) -> str:
    """A run's releases in one line, `keras 3.15.1, torch 2.13.0+cpu, ...` (the report's runs table)."""
    return ", ".join(f"{name} {version}" for name, version in releases_of(run).items()) or "not recorded"
