"""The epoch check (--epoch_check; run_all.py runs it by default): before the run, in the
same process, the same network, seed and settings on the first CHECK_STEPS batches of the
training split, for up to CHECK_EPOCHS epochs, validated each epoch on the first
CHECK_VAL_ROWS validation rows.

Why: two same-seed runs agree to float32 rounding only for the first steps; by step 20 or
so training has amplified that rounding past anything a test can tell from an error (the
drift envelope's horizon, analysis/drift_envelope.py). A run's first epoch boundary comes
much later (step 32 at the main command's settings), so an error that only acts there (the
batches not reshuffled, the optimizer's state reset, a schedule a step late, evaluation in
training mode) would pass as drift. Epochs of CHECK_STEPS steps put every boundary of the
first epochs where drift is still small; the compare judges the check's rows as it judges
a run's, against the envelope measured for the check.

Its rows go to <results_dir>/epoch_check/<the run's CSV name>, under the run's id, with a
settings record whose `part` names the check; it writes no results.log block, predictions
or printed summary. A run resumed with --resume skips it (it ran before the first start),
and so do the asynchronous strategies (ps, async), whose workers and servers start once a
process: their compare judges the run's own rows only.
"""

from __future__ import annotations

import os

from algorithms.records import CHECK_FOLDER
from algorithms.dataset.data import Dataset

CHECK_STEPS = 3  # optimizer steps per epoch of the check
# strategies whose worker and server processes start once a process (torch.distributed.rpc,
# the ps cluster): they run no epoch check
ASYNCHRONOUS = ("ps", "async")
CHECK_EPOCHS = 4  # at most: three boundaries, all before step 13
CHECK_VAL_ROWS = 200


def check_part(train_rows: int, val_rows: int) -> str:
    """The check's `part` setting: what it trains on, so two checks compare only alike."""
    return (
        f"epoch check: {CHECK_STEPS} steps per epoch on the first {train_rows} training rows, validation on {val_rows}"
    )


def check_run(config, dataset: Dataset) -> tuple:
    """(the check's config, its dataset) for a run's `config` and `dataset`."""
    rows = min(len(dataset.train_x), CHECK_STEPS * config.effective_batch_at(0))
    check_dataset = Dataset(
        dataset.train_x[:rows],
        dataset.train_y[:rows],
        dataset.val_x[:CHECK_VAL_ROWS],
        dataset.val_y[:CHECK_VAL_ROWS],
    )
    check_config = config.side_run(
        os.path.join(config.results_dir, CHECK_FOLDER),
        check_part(rows, len(check_dataset.val_x)),
        num_epochs=min(config.num_epochs, CHECK_EPOCHS),
        max_steps=None,
    )
    return check_config, check_dataset
