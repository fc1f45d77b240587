"""Framework-neutral core, in layers; each imports only the layers listed above it
(tests/test_imports.py holds the direction) and none imports a deep-learning framework.

    errors.py paths.py tables.py records.py figures.py ports.py
                  foundation: exit statuses, every path, text tables, the run records'
                  one reader, the figures' ending, free ports
    dataset/      the data: input files checked and read, the Dataset, the batch order
    network/      the network spec: layers, network files, initial weights, dropout, parallel plans
    reference/    the float64 reference: a network's passes, one optimizer step, a trainer's state
    machine/      threads and malloc, --tuned's settings, memory against what is free
    config/       the flags table, the parser and RunConfig derived from it, their checks
    contract/     the wrapper contract: its types, its checker, the wrapper skeleton
    session/      one run's bookkeeping: the RunSession and its parts, the records' writers
    run/          one run: the entry point, the loops, --batch_size auto and the probe
    registry/     the eight frameworks, what each runs, the environments they need
    analysis/     result CSVs read back: runs, compare, baselines, agreement, TensorBoard
    localisation/ where a difference enters: each framework's layers against the reference
    studies/      multi-run commands: the suite (run_all.py), drift, scaling, batch study, sweep
    bench/        the benchmark: probe processes' measurements, the data path, the GPU check
    interconnect/ what a link's rate and latency cost each strategy across two hosts
"""
