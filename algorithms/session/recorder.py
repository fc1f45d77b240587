"""Results written: per-step CSV rows (a run's through RunRows), the results.log summary block, Kaggle
predictions. Their names and columns, and reading them back, are algorithms/records.py's.

Rows are appended one whole line per `os.write` on an O_APPEND descriptor, so a
crash keeps every finished row and concurrent runs never interleave half rows. A
write the disk cuts short (full, over a quota or RLIMIT_FSIZE) is taken back, so the
file ends after its last whole line, and raised as OSError.
"""

from __future__ import annotations

import csv
import errno
import fcntl
import io
import json
import tempfile
import os
import sys
from typing import Optional

import numpy as np

from algorithms.errors import InputError, ResourceError
from algorithms.records import CSV_COLUMNS, ENVELOPE_ACCURACY, ENVELOPE_SETTINGS_PREFIX


class ResultsCsv:
    """Append-only writer for one results CSV."""

    def __init__(self, path: str, identity: dict):
        self.path = path
        self.identity = identity  # the columns that are the same on every row of a run
        self._fd = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            # under the lock: two runs starting together write one header
            created = append_whole(self._fd, (",".join(CSV_COLUMNS) + "\n").encode(), path, only_if_empty=True)
        except OSError as error:
            if self._fd is not None and os.fstat(self._fd).st_size == 0:
                _remove_quietly(path)  # no header could be written: leave no empty CSV behind
            self.close()
            raise ResourceError(cannot_write(path, error, "--results_dir")) from None
        if not created:
            try:
                self._fd = _upgraded_if_older(self._fd, path)
            except OSError as error:  # the folder does not take the rewritten file
                self.close()
                raise ResourceError(cannot_write(path, error, "--results_dir")) from None
            problem = _existing_csv_problem(self._fd)
            if problem:
                self.close()
                raise InputError(f"{path}:{problem}; move it away or pass another --results_dir")

    def write(self, **values) -> None:
        row = {**self.identity, **values}
        line = ",".join(_format(row.get(column)) for column in CSV_COLUMNS) + "\n"
        append_whole(self._fd, line.encode(), self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class RunRows:
    """A run's rows in its results CSV (ResultsCsv): a train row per optimizer step, a val row per
    epoch, a test row at the end, each with the run's identity columns. A worker process that
    leaves the records to its chief (`record=False`) writes none."""

    def __init__(self, path: str, identity: dict, record: bool):
        self.path = path
        self._csv = ResultsCsv(path, identity) if record else None

    def set_global_batch(self, global_batch: int) -> None:
        """--batch_schedule: the rows from here on are at this epoch's batch (a train row
        says its own step's rows, write(global_batch=...))."""
        if self._csv is not None:
            self._csv.identity["global_batch"] = global_batch

    def write(
        self,
        phase: str,
        epoch: Optional[int],
        step: int,
        loss: float,
        accuracy: Optional[float],
        wall_time_s: float,
        **measured,
    ) -> None:
        """`epoch` 0-based (1-based in the CSV), None on the test row; `measured`: the
        other CSV columns the row has (learning_rate, step_time_ms, ...)."""
        if self._csv is not None:
            self._csv.write(
                epoch=None if epoch is None else epoch + 1,
                step=step,
                phase=phase,
                loss=loss,
                accuracy=accuracy,
                wall_time_s=wall_time_s,
                **measured,
            )

    def close(self) -> None:
        if self._csv is not None:
            self._csv.close()


class TableCsv:
    """Append-only writer for a CSV of the run's own beside its results (the step check's
    rows): a header when the file is new, then one whole line per row, as ResultsCsv."""

    def __init__(self, path: str, columns: list):
        self.path, self.columns = path, columns
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            append_whole(self._fd, (",".join(columns) + "\n").encode(), path, only_if_empty=True)
        except OSError as error:
            raise ResourceError(cannot_write(path, error, "--results_dir")) from None

    def write(self, **values) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerow([_format(values.get(column)) for column in self.columns])
        append_whole(self._fd, buffer.getvalue().encode(), self.path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def append_whole(fd: int, data: bytes, path: str, only_if_empty: bool = False) -> bool:
    """One `os.write` of `data` at the end of the file under an exclusive lock (O_APPEND
    alone keeps whole lines on a local disk; the lock also covers network file systems).
    A short write (the disk full) is truncated away and raised as OSError naming `path`.
    `only_if_empty`: write only into an empty file; returns whether it wrote."""
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        size = os.fstat(fd).st_size
        if only_if_empty and size:
            return False
        written = os.write(fd, data)
        if written < len(data):
            os.ftruncate(fd, size)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return True
    except OSError as error:
        if error.filename is None:
            raise OSError(error.errno, error.strerror, path) from None
        raise
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _is_older_schema(names: list) -> bool:
    """An earlier version's header: some of today's columns, in today's order, the
    identity and measurement columns among them (columns are only ever added)."""
    return (
        names != CSV_COLUMNS
        and {"run_id", "phase", "loss"} <= set(names)
        and names == [column for column in CSV_COLUMNS if column in names]
    )


def _upgraded_if_older(fd: int, path: str) -> int:
    """A results CSV an earlier version wrote (fewer columns: before `worker` and
    `staleness`, say) is rewritten with today's header, each old row's new fields
    left empty (read_rows reads them as a synchronous run's: worker 0, staleness
    0), so new rows can be appended; a note says so. Under the file's lock, written
    to a temporary file and renamed over it; a run that waited for the lock finds
    the path renamed and reopens it. Returns the descriptor to append to."""
    while True:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino != os.fstat(fd).st_ino:  # another run upgraded it while this one waited
                reopened = os.open(path, os.O_RDWR | os.O_APPEND)
            else:
                with open(os.dup(fd), "rb") as handle:
                    handle.seek(0)
                    text = handle.read().decode("utf-8", "replace")
                lines = text.splitlines()
                names = lines[0].split(",") if lines else []
                if not text.endswith("\n") or not _is_older_schema(names):
                    return fd
                directory = os.path.dirname(path)
                temporary_fd, temporary = tempfile.mkstemp(dir=directory, prefix=".upgrade-")
                try:
                    with os.fdopen(temporary_fd, "w", newline="") as out:
                        out.write(",".join(CSV_COLUMNS) + "\n")
                        for row in csv.DictReader(lines):
                            out.write(",".join(row.get(column) or "" for column in CSV_COLUMNS) + "\n")
                        out.flush()
                        os.fsync(out.fileno())
                    os.chmod(temporary, os.fstat(fd).st_mode & 0o777)
                    os.replace(temporary, path)
                except BaseException:  # a full disk: the old file stays as it was, no copy left beside it
                    _remove_quietly(temporary)
                    raise
                reopened = os.open(path, os.O_RDWR | os.O_APPEND)
                missing = [column for column in CSV_COLUMNS if column not in names]
                print(
                    f"note: {path} was written by an earlier version without the {', '.join(missing)} "
                    "columns; rewritten with them (empty in its old rows)",
                    file=sys.stderr,
                )
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        fd = reopened


def _existing_csv_problem(fd: int) -> Optional[str]:
    """Why rows cannot be appended to this non-empty results CSV: other columns, or a
    last line without its end (a row cut off by a crash or an editor)."""
    with open(os.dup(fd), "rb") as handle:
        handle.seek(0)
        header = handle.readline().decode("utf-8", "replace").strip()
        handle.seek(-1, os.SEEK_END)
        ends_whole = handle.read(1) == b"\n"
    if header != ",".join(CSV_COLUMNS):
        names = header.split(",")
        missing = [column for column in CSV_COLUMNS if column not in names]
        extra = [name for name in names if name not in CSV_COLUMNS]
        what = "; ".join(
            part
            for part in (
                f"lacks {', '.join(missing)}" if missing else "",
                f"has {', '.join(extra[:3])}{', ...' if len(extra) > 3 else ''} besides" if extra else "",
                "" if missing or extra else "has the columns in another order",
            )
            if part
        )
        return f"1: this results file has other columns than this version writes ({what})"
    if not ends_whole:
        return " its last line is cut off (no line end): delete that line"
    return None


def cannot_write(path: str, error: OSError, flag: str) -> str:
    """One line for a results path that cannot be written: what the system said, and the fix."""
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        fix = f"free some space (or raise the file-size limit, `ulimit -f`), or pass {flag} on another disk"
    else:
        fix = f"pass a writable {flag}"
    return f"{path}: cannot be written ({reason}); {fix}"


def check_writable(results_dir: str, results_log: str) -> None:
    """Before anything is trained: --results_dir is (or can be made as) a folder this
    process can create files in, and --results_log a file it can append to. Creates
    nothing: a refusal after this one still leaves no trace."""
    if os.path.exists(results_dir) and not os.path.isdir(results_dir):
        raise InputError(f"--results_dir {results_dir}: is a file, not a folder; pass a folder")
    if os.path.isdir(results_log):
        raise InputError(
            f"--results_log {results_log}: is a folder; pass a file name, "
            f"e.g. {os.path.join(results_log, 'results.log')}"
        )
    for directory, flag in (
        (results_dir, "--results_dir"),
        (os.path.dirname(os.path.abspath(results_log)), "--results_log"),
    ):
        existing = directory  # made when the first row is written; nothing is made here
        while not os.path.exists(existing) and os.path.dirname(existing) != existing:
            existing = os.path.dirname(existing)
        if not os.path.isdir(existing):
            raise InputError(f"{flag} {directory}: {existing} is a file, not a folder; pass a folder")
        try:
            probe_fd, probe = tempfile.mkstemp(dir=existing, prefix=".write-check-")
            os.close(probe_fd)
            os.remove(probe)
        except OSError as error:
            raise ResourceError(f"{flag} " + cannot_write(directory, error, flag)) from None
    if os.path.exists(results_log):
        try:
            os.close(os.open(results_log, os.O_WRONLY | os.O_APPEND))
        except OSError as error:
            raise ResourceError("--results_log " + cannot_write(results_log, error, "--results_log")) from None


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return repr(value)  # shortest exact round-trip: diffs show real differences only
    return str(value)


def write_envelope_file(path: str, notes: tuple, settings: dict, steps, limit, accuracy, sources: dict) -> None:
    """A drift envelope as records.envelope_settings and analysis/drift_envelope.read_envelope
    read it: `# ` note lines, the settings' JSON line, then step, envelope, the accuracy
    envelope (None: no column) and each source's column; written whole, then moved into place."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w", newline="") as handle:
        handle.writelines(f"# {line}\n" for line in notes)
        handle.write(ENVELOPE_SETTINGS_PREFIX + json.dumps(settings, sort_keys=True) + "\n")
        writer = csv.writer(handle)
        kinds = list(sources)
        writer.writerow(["step", "envelope", *([] if accuracy is None else [ENVELOPE_ACCURACY]), *kinds])
        for i, step in enumerate(steps):
            writer.writerow(
                [int(step), repr(float(limit[i]))]
                + ([] if accuracy is None else [repr(float(accuracy[i]))])
                + [repr(float(sources[kind][i])) for kind in kinds]
            )
    os.replace(partial, path)


def write_predictions(path: str, labels: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".tmp"
    try:
        with open(temporary, "w") as handle:
            handle.write("ImageId,Label\n")
            handle.writelines(f"{i},{int(label)}\n" for i, label in enumerate(labels, start=1))
        os.replace(temporary, path)
    except OSError:
        _remove_quietly(temporary)  # a full disk leaves no half-written predictions
        raise


def append_log_block(path: str, title: str, fields: list) -> None:
    width = max(len(key) for key, _ in fields) + 1
    lines = [f"=== {title}"] + [f"{key + ':':<{width}} {value}" for key, value in fields] + [""]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # one write under the lock: two runs ending together keep their blocks whole, a full disk cuts none
        append_whole(fd, ("\n".join(lines) + "\n").encode(), path)
    finally:
        os.close(fd)
