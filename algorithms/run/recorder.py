"""Kept only for scripts/network_cost.py, which reads WARMUP_STEPS and read_rows from
here and is being moved by another change (this one leaves scripts/ alone). The records
are read by algorithms/records.py and written by algorithms/session/recorder.py: delete
this file once network_cost.py imports algorithms.records."""

from algorithms.records import WARMUP_STEPS, read_rows  # noqa: F401
