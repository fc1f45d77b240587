"""Studies: commands that run many entry-script processes and read their CSVs back. The
comparison of every framework (suite.py, run_all.py), run-to-run against cross-framework
drift (drift.py), the verdict's known answers (power.py on the envelope's runs, whole_runs.py
on whole runs), scaling over devices (scaling.py), Smith et al.'s batch study
(batch_study.py), the eager / graph / compiled sweep (execution_sweep.py); what they share,
the child entry-script runs and the command line, in children.py. What the link between
two hosts costs each strategy is measured in algorithms/interconnect/."""
