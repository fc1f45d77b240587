"""The environments of other releases (`run_all.py --versions`): one per release set, such
as `keras==3.14.0` or `jax==0.9.2 jaxlib==0.9.2`, built once from the registry and cached
under ~/.cache/cnn-parallel/releases/<set>/ (CNN_PARALLEL_RELEASES moves it).

Each is small: a venv holding only the distributions the set names (and whatever of their
dependencies the main env lacks or holds at a version they refuse), layered on the main
env's site-packages by a .pth file, so everything else is the main env's, pinned as in
requirements.txt. pip installs the set's distributions into the venv itself (never over
the main env's), then resolves their dependencies against requirements.txt's pins as
constraints: a set the resolver cannot settle (jax 0.9.2 beside jaxlib 0.10.2) is refused
in one line that names what to pin with it. `main` is the main env itself, nothing built.
Imports no framework."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass

from algorithms.errors import InputError, ResourceError
from algorithms.paths import RELEASES_CACHE, REQUIREMENTS

MAIN = "main"  # the set that is the main env as it is
MARKER = "release-set.json"  # written last: an env without it is half built, and built again
# the registry frameworks a distribution's release changes (the main env's: the legacy env
# and Caffe have releases of their own, outside this command)
FRAMEWORKS_OF = {
    "keras": ("keras_tensorflow", "keras_torch", "keras_jax"),
    "tensorflow": ("tensorflow", "keras_tensorflow"),
    "tensorflow-cpu": ("tensorflow", "keras_tensorflow"),
    "torch": ("torch", "keras_torch"),
    "jax": ("keras_jax",),
    "jaxlib": ("keras_jax",),
    "numpy": ("tensorflow", "keras_tensorflow", "keras_torch", "keras_jax", "torch"),
}
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")


def canonical(name: str) -> str:
    """A distribution's name as the registry compares them (PEP 503): `Tensorflow_CPU` is `tensorflow-cpu`."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ReleaseSet:
    pins: tuple  # ((canonical name, version), ...), sorted; () is the main env

    @property
    def key(self) -> str:
        """The set's folder name and run-id part: `keras-3.14.0`, `jax-0.9.2+jaxlib-0.9.2`, `main`."""
        return "+".join(f"{name}-{version}" for name, version in self.pins) or MAIN

    @property
    def text(self) -> str:
        """As the user writes it: `keras==3.14.0`, `jax==0.9.2 jaxlib==0.9.2`, `main`."""
        return " ".join(f"{name}=={version}" for name, version in self.pins) or MAIN

    def frameworks(self) -> tuple:
        """The registry names its distributions change, in the registry's order."""
        touched = {name for dist, _ in self.pins for name in FRAMEWORKS_OF.get(dist, ())}
        return tuple(name for name in FRAMEWORKS_OF["numpy"] if name in touched)


def parse_release_set(text: str) -> ReleaseSet:
    """`keras==3.14.0`, `jax==0.9.2,jaxlib==0.9.2` (commas or spaces) or `main`; anything
    else is an InputError in one line."""
    if text.strip() == MAIN:
        return ReleaseSet(())
    pins = {}
    for item in filter(None, re.split(r"[,\s]+", text)):
        match = _PIN.match(item)
        if not match:
            raise InputError(
                f"--versions {text!r}: {item!r} is not an exact release; give NAME==VERSION (keras==3.14.0), "
                "several in one set with spaces or commas, or 'main' for the main env"
            )
        name = canonical(match.group(1))
        if name in pins and pins[name] != match.group(2):
            raise InputError(f"--versions {text!r}: {name} twice, at {pins[name]} and {match.group(2)}; give one")
        pins[name] = match.group(2)
    if not pins:
        raise InputError("--versions: an empty release set; give NAME==VERSION (keras==3.14.0) or 'main'")
    return ReleaseSet(tuple(sorted(pins.items())))


def main_site_packages() -> str:
    """The main env's site-packages (this process runs in the main env)."""
    return os.path.realpath(sysconfig.get_paths()["purelib"])


def environment_python(release_set: ReleaseSet, cache: str = RELEASES_CACHE) -> str:
    if not release_set.pins:
        return sys.executable
    return os.path.join(cache, release_set.key, "bin", "python")


@dataclass(frozen=True)
class Built:
    python: str
    cached: bool
    seconds: float  # the build's wall time (0 when cached)
    size_mb: float  # what the env holds beside the main env's

    def describe(self, release_set: ReleaseSet) -> str:
        if not release_set.pins:
            return f"{release_set.text}: the main env ({self.python})"
        how = "cached" if self.cached else f"built in {self.seconds:.0f} s"
        return f"{release_set.text}: {os.path.dirname(os.path.dirname(self.python))} ({how}, {self.size_mb:.0f} MB)"


def ensure_environment(release_set: ReleaseSet, log_path: str, cache: str = RELEASES_CACHE) -> Built:
    """The set's environment, built now when it is missing or was built against other pins;
    raises InputError (one line: what failed, what to pin or fix, the log) when pip cannot
    build it. Two processes asking for one set build it once (a lock beside it)."""
    python = environment_python(release_set, cache)
    if not release_set.pins:
        return Built(python, True, 0.0, 0.0)
    folder = os.path.dirname(os.path.dirname(python))
    try:
        os.makedirs(cache, exist_ok=True)
        lock = open(os.path.join(cache, f".{release_set.key}.lock"), "w")
    except OSError as error:
        raise ResourceError(
            f"{cache}: the release environments cannot be written there ({error.strerror}); "
            "set CNN_PARALLEL_RELEASES to a writable folder"
        ) from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = _stamp(release_set)
        if _read_marker(folder) == stamp and os.path.exists(python):
            return Built(python, True, 0.0, _size_mb(folder))
        started = time.perf_counter()
        shutil.rmtree(folder, ignore_errors=True)
        try:
            _build(release_set, folder, python, log_path)
        except InputError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        with open(os.path.join(folder, MARKER), "w") as handle:
            json.dump(stamp, handle)
        return Built(python, False, time.perf_counter() - started, _size_mb(folder))


def _build(release_set: ReleaseSet, folder: str, python: str, log_path: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "w") as log:
        _step(log, [sys.executable, "-m", "venv", "--without-pip", folder], release_set, log_path)
        site = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        # after the env's own site-packages: the set's distributions shadow the main env's
        with open(os.path.join(site, "_cnn_parallel_main_env.pth"), "w") as handle:
            handle.write(f"import site; site.addsitedir({main_site_packages()!r})\n")
        pins = [f"{name}=={version}" for name, version in release_set.pins]
        pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-input", "--disable-pip-version-check"]
        # the set's own distributions in the env, whatever the main env holds of them
        _step(log, [*pip, "--no-deps", "--ignore-installed", *pins], release_set, log_path)
        constraints = os.path.join(folder, "constraints.txt")
        with open(constraints, "w") as handle:
            handle.write("\n".join(constraint_lines(release_set)) + "\n")
        # their dependencies: what the main env lacks, or holds at a version they refuse
        _step(log, [*pip, "-c", constraints, *pins], release_set, log_path)


def constraint_lines(release_set: ReleaseSet) -> list:
    """requirements.txt's requirements, less the distributions the set pins itself."""
    named = {name for name, _ in release_set.pins}
    lines = []
    with open(REQUIREMENTS) as handle:
        for line in handle:
            requirement = line.split("#", 1)[0].strip()
            match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
            if match and canonical(match.group(1)) not in named:
                lines.append(requirement)
    return lines


def _step(log, command: list, release_set: ReleaseSet, log_path: str) -> None:
    log.write(f"$ {' '.join(command)}\n")
    log.flush()
    proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
    log.write(proc.stdout)
    log.flush()
    if proc.returncode != 0:
        raise InputError(f"--versions {release_set.text!r}: {why_not(proc.stdout, release_set)}; log {log_path}")


def why_not(output: str, release_set: ReleaseSet) -> str:
    """pip's failure in one line, with what to pin or fix."""
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        name = re.split(r"[=<>!~]", missing.group(1))[0]
        return (
            f"the registry has no {missing.group(1)} for this Python and machine; `pip index versions {name}` "
            "lists the releases there"
        )
    if "ResolutionImpossible" in output or "conflicting dependencies" in output:
        named = {name for name, _ in release_set.pins}
        # pip's "The user requested (constraint) jaxlib==0.10.2": requirements.txt's pins in the way
        others = sorted(
            {canonical(name) for name in re.findall(r"requested \(constraint\) ([A-Za-z0-9._-]+)", output)} - named
        )
        causes = [line.strip() for line in output.splitlines() if re.search(r" depends on ", line)]
        cause = f" ({causes[0]})" if causes else ""
        if others:
            pins = " ".join(f"{name}==VERSION" for name in others)
            return (
                f"it conflicts with requirements.txt's pins of {', '.join(others)}{cause}; pin them in the same set: "
                f"--versions '{release_set.text} {pins}'"
            )
        return f"pip cannot resolve it{cause}; pin the distribution it names in the same set"
    errors = [line.strip() for line in output.splitlines() if line.startswith("ERROR")]
    return (errors or [line.strip() for line in output.splitlines() if line.strip()] or ["pip failed"])[-1][:300]


def _stamp(release_set: ReleaseSet) -> dict:
    """What an env was built against: the pins, requirements.txt and the main env's place."""
    with open(REQUIREMENTS, "rb") as handle:
        requirements = hashlib.sha256(handle.read()).hexdigest()[:16]
    return {
        "pins": [list(pin) for pin in release_set.pins],
        "requirements": requirements,
        "main": main_site_packages(),
        "python": sys.version.split()[0],
    }


def _read_marker(folder: str):
    try:
        with open(os.path.join(folder, MARKER)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _size_mb(folder: str) -> float:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                total += os.path.getsize(path)
    return total / 2**20
