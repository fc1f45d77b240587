"""Analysis of result CSVs, after the runs: a run read back (runs.py), the comparison and
its verdicts (compare.py), the answer a report opens with and the far-apart rule (answer.py),
each pair's picture (pair_figure.py), the releases two runs differ in (releases.py), the HTML
page a person reads and where it is written (report_page.py, report_files.py), the shipped
baselines (baseline.py), the seed regime's test and what it measures on the shipped seeds
(spread.py; false_alarms.py, band_power.py), how often frameworks' predictions agree
(agreement.py), and the rows as TensorBoard event files (tensorboard.py)."""
