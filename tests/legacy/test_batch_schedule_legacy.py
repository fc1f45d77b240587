"""--batch_schedule in Lasagne and Keras 2 on Theano (tests/test_batch_schedule.py's
check): each epoch's rows carry its batch and cover the training rows once. They
have no lr hook, so --lr_scaling does not apply."""

import pytest

from algorithms.registry.frameworks import FRAMEWORKS
from tests.conftest import csv_suffix
from tests.test_batch_schedule import check_schedule_rows, run_schedule

LEGACY = [framework for framework in FRAMEWORKS if framework.venv == "legacy"]
pytestmark = pytest.mark.slow  # a Theano run each, 20-90 s on 2 busy cores


@pytest.mark.parametrize("framework", LEGACY, ids=[csv_suffix(framework) for framework in LEGACY])
def test_a_schedules_batches_are_in_every_row_and_each_epoch_covers_the_data_once(framework, small_data, tmp_path):
    rows, log = run_schedule(framework, small_data, tmp_path)
    check_schedule_rows(rows, log, lr_follows=False)
