"""One run's bookkeeping, the same for every framework: the RunSession the loops and the
wrappers call step by step (run_session.py), and its parts: the CSV rows and
the files they go to (recorder.py, and the settings record, settings_record.py),
progress lines (progress.py), stopping rules (stopping.py), the clock (clock.py),
checkpoints (checkpoint.py), faults and exit statuses (faults.py), the gradient noise
scale (noise_scale.py) and the end-of-run report (report.py)."""
