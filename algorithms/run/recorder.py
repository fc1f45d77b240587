"""Kept only for scripts/network_cost.py and scripts/network_latency.py, which read
WARMUP_STEPS and read_rows from here and are being changed by another engineer (this
change leaves scripts/ alone). The records are read by algorithms/records.py and written
by algorithms/session/recorder.py: delete this file once the scripts import
algorithms.records."""

from algorithms.records import WARMUP_STEPS, read_rows  # noqa: F401
