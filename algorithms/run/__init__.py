"""The run core: what every entry script does, from flags to the CSV. The run's
configuration (config.py), its flags (flags.py) and which of them run together
(flag_checks.py); the wrapper contract (contract.py) and the parts of a wrapper's
Support several declare alike (shared_support.py); the entry point (entry.py); a
run's bookkeeping (session.py), composed of its CSV rows (rows.py), progress lines
(progress.py), stopping rules (stopping.py), learning-rate schedule (schedule.py),
clock (clock.py), checkpoints (checkpoint.py) and end-of-run report (report.py); the
loops that drive a wrapper's trainer (loop.py, updates.py); the CSV and results.log
files (recorder.py); faults, threads, the batch-size finder and the gradient noise
scale; and what a parent process does to its children: flags taken out of the argv it
passes on (argv.py), one probe process run and read back (probe_process.py)."""
