"""The support window: which releases of a framework the wrappers run, measured. Each release
gets its environment (registry/release_env.py: built once, cached) and a short run of each
framework it changes (two steps at batch 32 by default, any entry-script flag overrides),
and the table says, one line a release and framework, whether it ran and, where it did
not, why (its error's last line, or the environment that could not be built).

    python -m algorithms.studies.support_window --versions keras==3.0.0 keras==3.15.1 --only keras_torch
    python -m algorithms.studies.support_window --all keras --only keras_jax    # every release 3.0 on

--all NAME lists the registry's releases of NAME (`pip index versions`) from the oldest the
wrappers are written for (OLDEST) to the newest. Written: <results_dir>/support-window-<run
id>.csv (release set, framework, outcome, seconds, why). Docs: docs/releases.md.
"""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time

from algorithms.config.argv import without_flags
from algorithms.errors import EXIT_INPUT_ERROR, EXIT_RESOURCE_ERROR, InputError, ResourceError
from algorithms.records import run_ids
from algorithms.registry.frameworks import framework_names
from algorithms.registry.release_env import ensure_environment, parse_release_set
from algorithms.run.entry import prepare
from algorithms.session.run_session import new_run_id
from algorithms.studies import children
from algorithms.tables import last_line, text_table

SHORT_RUN = ["--max_steps", "2", "--batch_size", "32", "--test", "none", "--quiet"]
OLDEST = {"keras": "3.0.0", "tensorflow-cpu": "2.12.0", "torch": "2.0.0", "jax": "0.4.1", "jaxlib": "0.4.1"}


def registry_releases(name: str) -> list:
    """NAME's releases on the registry from OLDEST[name] on, oldest first (`pip index versions`)."""
    output = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", name], capture_output=True, text=True
    ).stdout
    found = re.search(r"Available versions: (.+)", output)
    if not found:
        raise InputError(f"--all {name}: the registry lists no releases of it ({last_line(output, 'no output')})")

    def key(version):
        return tuple(int(part) if part.isdigit() else 0 for part in re.split(r"[.+]", version))

    oldest = key(OLDEST.get(name, "0"))
    releases = [v for v in found.group(1).split(", ") if "+" not in v and re.fullmatch(r"[\d.]+", v)]
    return sorted((v for v in releases if key(v) >= oldest), key=key)


def main(argv=None) -> int:
    parser = children.study_parser("python -m algorithms.studies.support_window", description=__doc__)
    parser.add_argument("--versions", nargs="+", default=[], metavar="SET", help="release sets, as run_all.py's")
    parser.add_argument("--all", default=None, metavar="NAME", help="every registry release of NAME from OLDEST on")
    parser.add_argument("--only", default=None, help="comma-separated frameworks (default: those each set changes)")
    args, forwarded = children.parse_study_flags(parser, list(sys.argv[1:] if argv is None else argv))
    try:
        texts = list(args.versions) + [f"{args.all}=={v}" for v in registry_releases(args.all)] if args.all else []
        texts = texts or list(args.versions)
        if not texts:
            parser.error("give --versions SET ... or --all NAME")
        sets = [parse_release_set(text) for text in texts]
        config, _ = prepare(SHORT_RUN + forwarded, parser.prog, "")
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    run_id = new_run_id()
    forwarded = without_flags(SHORT_RUN + forwarded, "--run_id")
    rows = []
    path = os.path.join(config.results_dir, f"support-window-{run_id}.csv")
    os.makedirs(config.results_dir, exist_ok=True)
    for release_set in sets:
        names = framework_names(parser, args.only, "--only") if args.only else list(release_set.frameworks())
        log = os.path.join(config.results_dir, "build", f"release-{release_set.key}.log")
        try:
            built = ensure_environment(release_set, log)
        except ResourceError as error:
            print(f"error: {error}", file=sys.stderr)
            return EXIT_RESOURCE_ERROR
        except InputError as error:
            rows += [(release_set.text, name, "not built", "", str(error)) for name in names]
            _write(path, rows)
            continue
        for name in names:
            this_run = f"{run_id}-{release_set.key}"
            flags = forwarded + ["--run_id", this_run]
            framework_log = os.path.join(config.results_dir, "logs", this_run, f"{name}.log")
            started = time.perf_counter()
            code, _ = children.run_framework(
                name, flags, f"[{release_set.text}] {name}", quiet=False, log=framework_log, python=built.python
            )
            seconds = f"{time.perf_counter() - started:.0f}"
            csv_path = children.results_csv(config.results_dir, config.network.name, name)
            ran = code == 0 and os.path.exists(csv_path) and this_run in run_ids(csv_path)
            outcome, why = ("runs", "") if ran else (f"fails (exit {code})", children.last_error(framework_log))
            rows.append((release_set.text, name, outcome, seconds, why))
            _write(path, rows)
    print()
    for line in text_table(("release set", "framework", "outcome", "s", "why (its error's last line)"), rows):
        print(line)
    print(f"\nevery row: {path}")
    return 0


def _write(path: str, rows: list) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["release_set", "framework", "outcome", "seconds", "why"])
        writer.writerows(rows)


if __name__ == "__main__":
    sys.exit(main())
