"""Framework-neutral core, in layers; each imports only the layers listed above it
(tests/test_imports.py holds the direction) and none imports a deep-learning framework.

    errors.py paths.py tables.py   foundation: exit statuses, every path, text tables
    spec/        the network spec, initial weights, the parallel plan, the data and batch order
    run/         one run: flags and config, the wrapper contract, the entry point, the session,
                 the loops, the CSV recorder, checkpoints, faults, threads, the batch finder
    registry/    the eight frameworks, what each runs, the environments they need
    analysis/    result CSVs read back: runs, compare, baselines, agreement, TensorBoard
    studies/     multi-run commands: the suite (run_all.py), drift, scaling, batch study, sweep
    bench/       the benchmark: probe processes, GEMM peaks, the data path, the GPU check
"""
