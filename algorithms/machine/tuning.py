"""--tuned: a framework's best measured CPU setting, beside its defaults.

Each wrapper owns its table (`Support.tuning`, a `Tuning`): the documented CPU
switches worth measuring (`candidates`) and the one `--tuned` applies (`best`): the
fastest of them as `benchmark.py --candidates` measured it (results/benchmark/,
dated), or "default" where none beat the framework's defaults. Switches that
several wrappers share about one framework live in backends/tuning.py. Defaults stay
the default: nothing here runs without `--tuned`.

A setting is environment variables, set before the framework is imported (compilers
read their flags when they load), and in-process options its wrapper applies
(torch.compile's mode). A variable that holds a list (a table's `lists`: a compiler's
flags, a search path) is appended to, so the thread flags and the user's own stay.
Imports no framework."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

from algorithms.errors import InputError
from algorithms.machine.threads import environment_text

DEFAULT = "default"
BEST = "best"  # what a bare --tuned asks for: the table's best


def cpu_flags(path: str = "/proc/cpuinfo") -> Optional[set]:
    """The first processor's flags in /proc/cpuinfo (Linux's names: avx2, avx512f,
    avx512_bf16, amx_tile ...); None where the file cannot be read."""
    try:
        with open(path) as handle:
            text = handle.read()
    except OSError:
        return None
    return flags_in(text)


def flags_in(cpuinfo: str) -> set:
    """The first `flags` line of /proc/cpuinfo's text, as a set (empty: none)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@dataclass(frozen=True)
class Setting:
    name: str
    env: dict = field(default_factory=dict, hash=False)  # set before the framework loads
    options: dict = field(default_factory=dict, hash=False)  # applied by the wrapper, e.g. {"torch.compile": mode}
    why: str = ""  # what the switch does, from the framework's documentation
    # the CPU flag the setting needs ("": none): one that names an instruction set (a BLAS's
    # AVX-512 kernels) would stop the process with an illegal instruction on a CPU without it
    cpu_flag: str = ""

    def lacking(self, flags: Optional[set]) -> str:
        """Why this CPU cannot take the setting ("" where it can); `flags`: cpu_flags()."""
        if not self.cpu_flag or (flags is not None and self.cpu_flag in flags):
            return ""
        return f"{self.name} needs the CPU's {self.cpu_flag}, which " + (
            "this CPU lacks" if flags is not None else "cannot be read here (no /proc/cpuinfo)"
        )

    def describe(self) -> str:
        parts = [f"{name}={value}" for name, value in self.env.items()]
        parts += [f"{name}(mode={value!r})" for name, value in self.options.items()]
        return f"{self.name}: " + (" ".join(parts) or "the framework's defaults")


@dataclass(frozen=True)
class Tuning:
    """One framework's --tuned table, as its wrapper declares it in `supported()`."""

    framework: str  # the registry name the table is for, e.g. "keras_jax"
    candidates: tuple = ()  # of Setting: what `benchmark.py --candidates` measures
    best: str = DEFAULT  # the candidate --tuned applies, or DEFAULT where none beat the defaults
    measured: str = ""  # where the choice of `best` was measured (a results/benchmark/ file)
    # the variables of its settings that hold a list (name -> separator): appended to, never replaced
    lists: Mapping[str, str] = field(default_factory=dict, hash=False)

    def settings(self) -> dict:
        """name -> Setting, the defaults first."""
        return {DEFAULT: Setting(DEFAULT), **{setting.name: setting for setting in self.candidates}}

    def resolve(self, requested: str, flags: Optional[set] = None) -> Setting:
        """The Setting `--tuned [NAME]` names (BEST: the table's best, or the defaults where
        this CPU lacks what the best needs); `flags`: the CPU's, cpu_flags()."""
        name = self.best if requested == BEST else requested
        known = self.settings()
        if name not in known:
            raise InputError(
                f"--tuned {requested}: {self.framework} has the settings {', '.join(known)}; "
                f"drop the name for its best measured one ({self.best})"
            )
        lacking = known[name].lacking(flags)
        if lacking and requested == BEST:
            return known[DEFAULT]
        if lacking:
            raise InputError(f"--tuned {requested}: {lacking}; drop it, or --tuned alone for what this CPU takes")
        return known[name]


def apply(setting: Setting, environ=os.environ, lists: Optional[Mapping[str, str]] = None) -> str:
    """Sets the setting's environment (before the framework is imported), appending to
    each variable of `lists` (name -> separator: the table's) that holds a value already;
    returns the results.log line."""
    lists = lists or {}
    for name, value in setting.env.items():
        if name in lists and environ.get(name):
            environ[name] = f"{environ[name]}{lists[name]}{value}"
        else:
            environ[name] = value
    return setting.describe()


def resolve_tuned(config, tuning: Tuning):
    """The config with --tuned resolved to a setting name of the wrapper's table, and the
    table kept beside it (an unknown name: InputError, before anything loads); unchanged
    without --tuned."""
    if not config.tuned:
        return config
    return replace(config, tuned=tuning.resolve(config.tuned, cpu_flags()).name, tuning=tuning)


def _setting(config) -> Setting:
    return config.tuning.settings()[config.tuned]


def apply_tuned(config) -> str:
    """--tuned's environment, set before the framework is imported; "" without --tuned."""
    return apply(_setting(config), lists=config.tuning.lists) if config.tuned else ""


def tuned_options(config) -> dict:
    """The in-process options of the run's --tuned setting ({} without --tuned)."""
    return _setting(config).options if config.tuned else {}


def log_line(config) -> str:
    """results.log's `tuned` line: the setting applied, or the defaults."""
    if not config.tuned:
        return "off: the framework's defaults (--tuned applies its best measured setting)"
    setting, best = _setting(config), config.tuning.settings()[config.tuning.best]
    chosen = "its best measured setting" if config.tuned == config.tuning.best else "a named candidate"
    lacking = best.lacking(cpu_flags()) if config.tuned == DEFAULT else ""
    if lacking:
        chosen = f"its best measured setting is {best.name}, but {lacking}"
    actual = f"; as set: {environment_text(setting.env)}" if setting.env else ""
    where = f"; measured in {config.tuning.measured}" if config.tuning.measured else ""
    return f"{setting.describe()} ({chosen}{where}){actual}"
