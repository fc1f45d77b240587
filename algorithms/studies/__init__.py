"""Studies: commands that run many entry-script processes and read their CSVs back. The
comparison of every framework (suite.py, run_all.py), run-to-run against cross-framework
drift (drift.py), scaling over devices (scaling.py), Smith et al.'s batch study
(batch_study.py), the eager / graph / compiled sweep (execution_sweep.py), and what a
network's rate and latency cost each 2-host strategy (network_cost.py, network_latency.py,
on scripts/netns_cluster.py's hosts); what they share, the child entry-script runs and the
command line, in children.py."""
