"""Tools a user runs beside the entry scripts: netns_cluster.py rehearses a cluster of
several hosts on one Linux machine (network namespaces on a private bridge)."""
