"""Analysis of result CSVs, after the runs: a run read back (runs.py), the comparison and
its verdicts (compare.py), the HTML page a person reads and where it is written (report_page.py,
report_files.py), the shipped baselines (baseline.py), how often frameworks'
predictions agree (agreement.py), and the rows as TensorBoard event files (tensorboard.py)."""
