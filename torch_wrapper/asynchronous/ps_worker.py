"""One worker of a torch `--strategy ps` run whose coordinator is on another host.

    python -m torch_wrapper.asynchronous.ps_worker --worker K  THE RUN'S FLAGS

The coordinator's host runs `torch_script.py --strategy ps --devices N --ps_endpoint
HOST:PORT --remote_workers R ...` (the server and workers 0..N-R-1 with it); each of
the last R workers is this command on its own host, with --worker K (N-R <= K < N) and
the same flags, so both sides build the same model. It joins the run at --ps_endpoint
(TensorPipe on the interface this host reaches it through), computes the shares the
coordinator sends it until the run ends, and exits 0; it records nothing (the coordinator
writes the CSV and results.log). A coordinator that is lost ends it with status 4 and one
line.
"""

from __future__ import annotations

import argparse
import sys

from algorithms.errors import EXIT_INPUT_ERROR, EXIT_PEER_LOST, InputError
from algorithms.config.run_config import parse_config

PROG = "python -m torch_wrapper.asynchronous.ps_worker"


def split_worker(argv: list) -> tuple:
    """(K, the run's flags) from `--worker K FLAGS...`; InputError naming the fix."""
    parser = argparse.ArgumentParser(prog=PROG, add_help=False)
    parser.add_argument("--worker", type=int)
    known, rest = parser.parse_known_args(argv)
    if known.worker is None:
        raise InputError("--worker K is missing: which of the run's workers this host runs (0-based)")
    return known.worker, rest


def check(config, worker: int) -> None:
    if config.strategy != "ps" or not config.ps_endpoint:
        raise InputError(
            "a remote worker joins a --strategy ps run across hosts: pass the coordinator's flags, "
            "--strategy ps and --ps_endpoint HOST:PORT included"
        )
    first_remote = config.devices - config.remote_workers
    if not first_remote <= worker < config.devices:
        raise InputError(
            f"--worker {worker}: the coordinator starts workers 0-{first_remote - 1} itself; "
            f"the remote ones are {first_remote}-{config.devices - 1} (--devices {config.devices}, "
            f"--remote_workers {config.remote_workers})"
        )


def main(argv: list) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(f"usage: {PROG} --worker K [the coordinator's flags]\n\n{__doc__}")
        return 0
    try:
        worker, flags = split_worker(argv)
        config = parse_config(flags, PROG, __doc__.splitlines()[0])
        check(config, worker)
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    from algorithms.machine.threads import set_thread_environment

    set_thread_environment(config.threads)
    from torch_wrapper.asynchronous import param_server

    try:
        param_server.work(config, worker, config.threads, None, interruptible=True)
    except RuntimeError as error:  # the coordinator (or the server) is gone
        print(f"error: ps worker {worker} lost the run: {str(error).splitlines()[0][:200]}", file=sys.stderr)
        return EXIT_PEER_LOST
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
