"""Tools a user runs beside the entry scripts: netns_cluster.py rehearses a cluster of
several hosts on one Linux machine (network namespaces on a private bridge), delay_line.py
delays its packets, ping.py measures its round trips; example_data.py writes the examples'
data; Slurm and Kubernetes recipes. The studies that run on the cluster are in
algorithms/interconnect/ (network_cost.py, network_latency.py)."""
