"""The run core: what every entry script does, from flags to the CSV. The run's
configuration (config.py), its flags (flags.py) and which of them can run together
(flag_checks.py), the learning-rate schedule (schedule.py), the wrapper contract (contract.py), the entry
point (entry.py), a run's bookkeeping (session.py), the loops that drive a wrapper's
trainer (loop.py, updates.py), the CSV rows and results.log blocks (recorder.py),
checkpoints, faults, threads, the batch-size finder and the gradient noise scale."""
