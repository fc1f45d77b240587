"""The run's own yardstick (algorithms/run/yardstick.py): how many steps its twin takes and
when a kept one is reused. Its verdicts: tests/test_verdict.py and tests/test_own_network_runs.py."""

from __future__ import annotations

import numpy as np

from algorithms.config.run_config import parse_config
from algorithms.dataset.data import Dataset
from algorithms.records import yardstick_envelope
from algorithms.run import yardstick
from algorithms.session.recorder import write_envelope_file
from algorithms.session.settings_record import yardstick_key


def config_and_data(tmp_path, rows: int, *flags):
    config = parse_config(["--results_dir", str(tmp_path), *flags], "torch_script.py", "")
    images = np.zeros((rows, 28, 28, 1), np.float32)
    labels = np.arange(rows) % 10
    return config, Dataset(images, labels, images[:10], labels[:10])


def test_the_twin_takes_40_steps_or_the_runs_own_where_it_takes_fewer(tmp_path):
    assert yardstick.twin_steps(*config_and_data(tmp_path, 480, "--batch_size", "64", "--num_epochs", "1")) == 8
    assert yardstick.twin_steps(*config_and_data(tmp_path, 480, "--batch_size", "64", "--num_epochs", "3")) == 24
    assert yardstick.twin_steps(*config_and_data(tmp_path, 480, "--batch_size", "60", "--num_epochs", "9")) == 40
    config, data = config_and_data(tmp_path, 480, "--batch_size", "64", "--num_epochs", "3", "--max_steps", "5")
    assert yardstick.twin_steps(config, data) == 5


def test_a_kept_yardstick_is_reused_only_where_it_covers_the_twins_steps(tmp_path):
    config, _ = config_and_data(tmp_path, 480, "--batch_size", "64")
    settings = {"network": "n", "batch_size": 64}
    assert yardstick.resolve(config, settings, 24) == "measure"
    path = yardstick_envelope(str(tmp_path), yardstick_key(settings))
    steps = np.arange(0, 9)
    write_envelope_file(path, (), settings, steps, np.ones(9), None, {})
    assert yardstick.resolve(config, settings, 8) == "reuse"
    assert yardstick.resolve(config, settings, 24) == "measure"  # an earlier run of 8 steps kept it
