"""Where a difference enters: every framework's layers against the spec's float64
reference. The command (localise.py, `python -m algorithms.localisation.localise`) runs
one process per framework (localise_child.py) and judges what each wrote: the
structural check of their parameters first (structure.py), then each layer's output
and gradient as cells (localisation.py), read as tables, a heatmap and a CSV
(localisation_report.py). Beside analysis/, which reads runs back from their CSVs."""
