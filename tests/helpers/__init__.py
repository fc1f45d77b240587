"""What the tests share, apart from the tests: the entry scripts' command lines as the
tests build them (flags.py), the parallel strategies' probe and runs (training.py),
results CSVs with known answers (synthetic_runs.py), the two-host network namespaces
(netns.py) and the sockets a process tree listens on (listening.py), a page opened in
headless Chromium (headless_chromium.py), and the probes a test runs in a framework's
own process, each printing JSON (gradient_probe.py, initial_loss_probe.py,
keras_dropout_probe.py, torch_parallel_probe.py). Fixtures stay in tests/conftest.py."""
