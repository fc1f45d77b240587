"""Parallel against single is a same-seed pair: a run that splits one synchronous step over
devices (data, model, tensor, pipeline) adds the same sums over the same global batch in
another order, so `run_all.py --strategies` and the compare judge it against the
single-device run as drift, like another framework, and never as `settings differ`."""

from __future__ import annotations

import re

import pytest

from algorithms.records import results_csv_name
from tests.conftest import run_module, run_script

STRATEGIES = "single,data,model,pipeline,tensor"


@pytest.mark.slow
def test_every_synchronous_split_of_torch_and_tensorflow_is_within_drift_of_the_single_device_run(tmp_path):
    results = tmp_path / "results"
    proc = run_script(
        "run_all.py",
        ["--strategies", STRATEGIES, "--devices", "2", "--only", "torch,tensorflow", "--max_steps", "8"]
        + ["--no_epoch_check", "--results_dir", str(results), "--results_log", str(tmp_path / "results.log")],
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    lines = proc.stdout[proc.stdout.index("verdicts against torch/torch") :].split("\n\n")[0]
    verdicts = re.findall(r"^  (\S+/\S+(?: \S+)?)\s+(.+?) · val acc gap", lines, re.M)
    # TensorFlow's single run, and the nine others: torch's 4 splits, TensorFlow's 5 strategies
    assert len(verdicts) == 9, lines
    for label, verdict in verdicts:
        assert verdict.startswith("within drift"), (label, verdict)
        assert "settings differ" not in verdict and "beyond" not in verdict, (label, verdict)

    # the compare says the same of one pair given by hand, and says why it is drift
    csv = str(results / results_csv_name("cnn2d_3layer_fullconnected_3layer", "torch", "torch"))
    run_id = re.search(r"run (\S+): cnn2d", proc.stdout).group(1)
    compared = run_module(
        "algorithms.analysis.compare", [f"{csv}@{run_id}-single", f"{csv}@{run_id}-data", "--verbose"]
    )
    assert compared.returncode == 0, compared.stderr[-2000:]
    assert re.search(r"vs  torch/torch \S+-data: within drift", compared.stdout), compared.stdout[-3000:]
    assert "the step split otherwise (strategy single vs data; devices 1 vs 2" in compared.stdout
