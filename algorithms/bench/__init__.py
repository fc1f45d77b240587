"""The benchmark: benchmark.py starts one probe process per framework (probe.py), which
times the harness against the wrapper's native loop, the GEMM peak, compiled paths and
profiles; the data path (data_benchmark.py); the one-command GPU check (gpu_check.py)."""
