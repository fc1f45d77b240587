"""What a run asks of this machine, set or checked before the framework loads: the
thread and malloc environment (threads.py), --tuned's settings (tuning.py), OpenBLAS's
core for this CPU (openblas.py), and the memory and processes a run will start against
what is free (resources.py)."""
