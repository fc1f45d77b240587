"""Flags taken out of an entry script's argv before it is handed to a child process
(a batch-size trial, a study's runs): those the parent sets itself, or those only some
of its children may see. argparse keeps the last of a repeated flag, so adding one
overrides it; taking one out must catch both of its spellings, `--flag VALUE` and
`--flag=VALUE`."""

from __future__ import annotations


def split_flags(argv: list, valued=(), bare=()) -> tuple:
    """(`argv` without the named flags, the flags taken out), both in argv's order: each
    of `valued` with its value (`--flag VALUE` or `--flag=VALUE`), each of `bare` alone
    (`--flag`, or a stray `--flag=...`). `valued` and `bare`: a flag, or several."""
    valued, bare = _names(valued), _names(bare)
    kept, taken, take_value = [], [], False
    for arg in argv:
        name = arg.split("=", 1)[0]
        if take_value:
            taken.append(arg)
            take_value = False
        elif name in valued or name in bare:
            taken.append(arg)
            take_value = arg == name and name in valued
        else:
            kept.append(arg)
    return kept, taken


def without_flags(argv: list, valued=(), bare=()) -> list:
    """`argv` without the named flags (see split_flags)."""
    return split_flags(argv, valued, bare)[0]


def _names(flags) -> frozenset:
    return frozenset([flags] if isinstance(flags, str) else flags)


def flag_value(argv: list, flag: str, default: str) -> str:
    """The value an entry script will read for `flag` in `argv` (argparse keeps the last one given)."""
    value = default
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(flag + "="):
            value = arg.split("=", 1)[1]
    return value
