"""What the link between hosts costs each 2-host strategy: runs across the hosts of the
rehearsal cluster (scripts/netns_cluster.py) at each rate of its cables (network_cost.py)
and each delay of its packets (network_latency.py, through scripts/delay_line.py and
scripts/ping.py), with the tables, CSVs and plots they write to results/benchmark/; what
both do alike (a run's processes on the hosts, the reference run, their flags) in hosts.py. The
layer's only user of scripts/; beside studies/ and bench/ at the top, it imports neither."""
