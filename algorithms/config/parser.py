"""The argparse parser of the shared flags, built from flags.py's table
(`build_parser`), its --help (each default said once), and the parser that makes a
malformed flag one line and exit status 2 (`OneLineErrorParser`, which the studies and
the benchmark use too)."""

from __future__ import annotations

import argparse
from typing import Optional

from algorithms.errors import EXIT_INPUT_ERROR
from algorithms.config.flags import FLAGS, HelpScope
from algorithms.network.networks import NETWORKS


class OneLineErrorParser(argparse.ArgumentParser):
    """A malformed flag is one line on stderr and exit status 2, like every input error."""

    def error(self, message):
        self.exit(EXIT_INPUT_ERROR, f"error: {message} (see {self.prog} --help)\n")


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in --help, added only where a flag's own help does not already
    say its default, and only a default worth saying (not None, a switch's False or '')."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, "") or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def build_parser(prog: str, description: str, scope: Optional[HelpScope] = None) -> argparse.ArgumentParser:
    """The shared flags; `scope`: what this script runs (its wrapper's Support), which its
    --help lists (every flag is still parsed, so the wrapper's refusal names the fix);
    None: everything, as a study passes the flags on to every framework."""
    scope = scope or HelpScope()
    parser = OneLineErrorParser(
        prog=prog,
        description=description,
        formatter_class=DefaultsHelpFormatter,
        epilog="Preset defaults (batch size, epochs, learning rate, optimizer) come from the network: "
        + "; ".join(
            f"{n.name}: batch {n.training.batch_size}, {n.training.epochs} epochs, "
            f"{n.training.optimizer.name} lr {n.training.optimizer.learning_rate:g}"
            for n in NETWORKS.values()
        ),
    )
    groups = {}
    for shared in FLAGS:
        if shared.group not in groups:
            groups[shared.group] = parser.add_argument_group(shared.group)
        options = {**shared.options, **(shared.scoped(scope, shared) if shared.scoped else {})}
        if scope.hides(shared):
            options["help"] = argparse.SUPPRESS
        groups[shared.group].add_argument(*shared.names, **options)
    return parser
