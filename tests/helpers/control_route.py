"""The route a run's control takes through the project's modules, measured on a real
run: from the wrapper's `train(session)` until it returns, every project function the run
calls is followed at its first call (as one reads the code: a function read once is not
read again, so a loop's later steps add nothing) and the module it is defined in is a
stop; returning from it is a stop in its caller's module again. Consecutive stops in one
module are one stay. What the route tells: its stays, the modules it enters, and how often
it comes back to a module it had already left (stays minus modules), the measure of
control going back and forth (docs/architecture.md, one direction of control).

    python -m tests.helpers.control_route SCRIPT [FLAGS...]    # e.g. torch_script.py --max_steps 20

prints the route, a stay per line, then one JSON line: {"stays": ..., "modules": ...,
"returns": ..., "route": [...]}. Only the main thread is followed (the prefetching
thread is not control), and module bodies (imports) are not functions of the run."""

from __future__ import annotations

import json
import os
import sys
import threading

from algorithms.paths import REPO_ROOT
from algorithms.registry.frameworks import FRAMEWORKS

VENVS = tuple(os.path.join(REPO_ROOT, name) + os.sep for name in (".venv", ".venv-legacy"))


def project_module(filename: str):
    """A project file's path from the repository's root, or None (the standard library, a framework, the venvs,
    code with no file: `<frozen os>`, a dataclass's generated `<string>`)."""
    if filename.startswith("<"):
        return None
    path = os.path.realpath(filename)
    root = os.path.realpath(REPO_ROOT) + os.sep
    if not path.startswith(root) or path.startswith(VENVS) or "/site-packages/" in path:
        return None
    return os.path.relpath(path, root)


class Route:
    """A sys.setprofile function: follows the run from the first call of `train` in
    `train_file` to its return (module docstring)."""

    def __init__(self, train_file: str):
        self.train_file = os.path.realpath(train_file)
        self.stops: list = []
        self.stack: list = []  # per frame the run is in: its project module, or None
        self.seen: set = set()
        self.skipping = 0  # depth inside a call already followed once
        self.active = False

    def __call__(self, frame, event, arg) -> None:
        if event == "call":
            self._call(frame)
        elif event == "return" and self.active:
            self._return()

    def _call(self, frame) -> None:
        code = frame.f_code
        if not self.active:
            if code.co_name == "train" and os.path.realpath(code.co_filename) == self.train_file:
                self.active = True
                self.stack = [project_module(code.co_filename)]
                self.stops.append(self.stack[0])
            return
        if self.skipping:
            self.skipping += 1
            return
        module = None if code.co_name == "<module>" else project_module(code.co_filename)
        if module is not None and code in self.seen:
            self.skipping = 1
            return
        if module is not None:
            self.seen.add(code)
            self.stops.append(module)
        self.stack.append(module)

    def _return(self) -> None:
        if self.skipping:
            self.skipping -= 1
            return
        module = self.stack.pop()
        if not self.stack:  # train(session) returned
            self.active = False
            return
        if module is not None:
            caller = next((m for m in reversed(self.stack) if m is not None), None)
            if caller is not None:
                self.stops.append(caller)

    def stays(self) -> list:
        return [
            module for position, module in enumerate(self.stops) if position == 0 or module != self.stops[position - 1]
        ]


def measure(script: str, argv: list) -> dict:
    """Runs the entry script's run in this process with the route followed; its numbers."""
    from algorithms.run.entry import run_entry_point

    framework = next(framework for framework in FRAMEWORKS if framework.script == script)
    os.environ.update(framework.env)
    route = Route(os.path.join(REPO_ROOT, framework.package, "train.py"))
    sys.setprofile(route)
    try:
        status = run_entry_point(f"{framework.package}.train", script, "", argv)
    finally:
        sys.setprofile(None)
    stays = route.stays()
    return {
        "status": status,
        "stays": len(stays),
        "modules": len(set(stays)),
        "returns": len(stays) - len(set(stays)),
        "route": stays,
    }


def main(argv: list) -> int:
    assert threading.current_thread() is threading.main_thread()
    result = measure(argv[0], argv[1:])
    for number, module in enumerate(result["route"], 1):
        print(f"{number:4d}  {module}", file=sys.stderr)
    print(json.dumps(result))
    return 0 if result["status"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
