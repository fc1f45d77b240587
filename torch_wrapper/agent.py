"""torchrun's agent as launch.py starts it (`python -m torch_wrapper.agent <torchrun flags>`):
torch.distributed.run itself, with a failure told in one line and no rank left behind.

torchrun starts the ranks one Popen at a time. When one cannot be started (fork refused:
a limit on processes such as RLIMIT_NPROC, or no memory), torch 2.13 raises out of
SubprocessContext._start before it has kept any handle, so the ranks already started
are never stopped: they outlive the agent, waiting for a rendezvous that never comes.
Here the agent kills them before it exits, and each rank dies with the agent anyway
(launch.py: `die_with_parent`), however the agent ends."""

from __future__ import annotations

import logging
import os
import sys

from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import parse_args, run

from algorithms.errors import EXIT_PEER_LOST, EXIT_RESOURCE_ERROR
from algorithms.machine.processes import how_it_ended
from algorithms.machine.resources import children, end_children, why_not_started
from torch_wrapper.nodes import prepare

# torchrun's own account of a failed rank, which the one line below replaces
REPLACED_LOG_MESSAGES = (
    "Sending process %s closing signal %s",
    "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s",
)


class _ReplacedReport(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in REPLACED_LOG_MESSAGES


def report_through_filter() -> None:
    """torchrun's log lines as before (stderr, its level), less those the one line replaces."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_ReplacedReport())
    elastic = logging.getLogger("torch.distributed.elastic")
    elastic.addHandler(handler)
    elastic.propagate = False


def main(argv: list) -> int:
    report_through_filter()
    args = parse_args(argv)
    prepare(args)
    try:
        run(args)
    except ChildFailedError as failed:
        rank, failure = failed.get_first_failure()
        print(
            f"error: {os.path.basename(failed.name)} FAILED: rank {rank} (pid {failure.pid}) "
            f"{how_it_ended(failure.exitcode)}; torchrun stopped the other ranks",
            file=sys.stderr,
        )
        return failure.exitcode if failure.exitcode > 0 else EXIT_PEER_LOST
    except OSError as error:  # a rank's fork or exec refused
        started = len(children(os.getpid()))
        end_children()
        print(
            f"error: torchrun started {started} of {args.nproc_per_node} ranks and could not start the next one "
            f"({why_not_started(error)}); the {started} it had started were stopped; run fewer --devices",
            file=sys.stderr,
        )
        return EXIT_RESOURCE_ERROR
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
