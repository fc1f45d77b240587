"""The run core: what every entry script does, from flags to the CSV. The run's
configuration and flags (config.py), the wrapper contract (contract.py) and the parts
of a wrapper's Support several declare alike (shared_support.py), the entry
point (entry.py), a run's bookkeeping (session.py), the loops that drive a wrapper's
trainer (loop.py, updates.py), the CSV rows and results.log blocks (recorder.py),
checkpoints, faults, threads, the batch-size finder and the gradient noise scale, and
what a parent process does to its children: flags taken out of the argv it passes on
(argv.py), one probe process run and read back (probe_process.py)."""
