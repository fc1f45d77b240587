"""What every entry script does: parse the shared flags, load and check the data
(before any framework is imported, so a bad input fails fast with status 2 and
writes nothing), then hand the run to one wrapper.

A wrapper module passed to `run_entry_point` provides:
    describe_runtime() -> (framework, backend, {package: version}, devices text)
    train(session) -> summary dict     (trains, then calls session.finish)
and may provide
    for_this_worker(config) -> config  (multi-process runs: where this process writes;
                                        workers other than the chief write to scratch)
and its package's `__init__.py` (which must not import the framework) provides
    supported() -> {"strategies": (...), "flags": (...)[, "advice": {strategy: text}]}
naming the strategies and the optional flags (`RunConfig.uses()` keys) it implements,
so an unsupported request fails before the framework loads ("advice" replaces the
generic message for a strategy it does not run), and may provide
    prepare_process(config, dataset)  sets what the framework reads when imported (device
                                      counts); raises InputError for what it cannot run on this data
"""
from __future__ import annotations

import importlib
import sys
from dataclasses import replace
from typing import Optional

from .cli import DEFAULT_DATA_DIR, DEFAULT_TRAIN, parse_config
from .data import default_test_labels, ensure_default_data, load_dataset
from .errors import EXIT_INPUT_ERROR, InputError
from .session import RunSession


def prepare(argv: Optional[list], prog: str, description: str):
    """Flags and data, checked. Raises InputError for the user's mistakes."""
    config = parse_config(argv, prog, description)
    if config.train == DEFAULT_TRAIN:
        ensure_default_data(DEFAULT_DATA_DIR)
    config = replace(config, test_labels=config.test_labels or default_test_labels(config.test))
    dataset = load_dataset(config.train, config.test, config.test_labels, config.validation_split, config.seed)
    return config, dataset


def run_entry_point(wrapper_module: str, prog: str, description: str, argv: Optional[list] = None) -> int:
    try:
        config, dataset = prepare(argv, prog, description)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    try:
        check_supported(config, wrapper_module, prog)
        package = importlib.import_module(wrapper_module.split(".")[0])
        if hasattr(package, "prepare_process"):
            package.prepare_process(config, dataset)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    wrapper = importlib.import_module(wrapper_module)
    if hasattr(wrapper, "for_this_worker"):
        config = wrapper.for_this_worker(config)
    framework, backend, versions, devices = wrapper.describe_runtime()
    try:
        session = RunSession(config, dataset, framework, backend, versions, devices)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    return train_session(wrapper, session)


def check_supported(config, wrapper_module: str, prog: str) -> None:
    package = importlib.import_module(wrapper_module.split(".")[0])
    supported = package.supported()
    if config.strategy not in supported["strategies"]:
        advice = supported.get("advice", {}).get(config.strategy)
        raise InputError(f"--strategy {config.strategy}: " + (advice or (
            f"{prog} runs {', '.join(supported['strategies'])}; "
            "see README's strategy table for the frameworks that run it")))
    missing = [flag for flag, used in config.uses().items() if used and flag not in supported["flags"]]
    if missing:
        raise InputError(f"{', '.join(missing)}: not available in {prog}; drop the flag "
                         "or see README's feature table for the frameworks that have it")


def train_session(wrapper, session: RunSession) -> int:
    try:
        wrapper.train(session)
    except KeyboardInterrupt:
        session.finish(None, None, None, status="interrupted")
        print("\ninterrupted: the rows of every finished step are in " + session.csv_path, file=sys.stderr)
        return 130
    except BaseException as error:
        session.finish(None, None, None, status=f"failed: {type(error).__name__}: {error}")
        raise
    return 0
