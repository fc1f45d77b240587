"""A run's settings as the comparison reads them: the run's settings record
(algorithms/session/settings_record.py), or for an older file without one, what its rows
show (network, batch, strategy, devices, the learning rate of its train rows, the
epochs it validated); a setting neither says is unknown, and said so.

Which differences stop a verdict:
- the seed is the one setting a pair may differ in;
- THREADS_AND_KERNELS (threads, execution mode, --tuned, the device's model, the releases of
  the framework and its libraries) change only the order and the kernels of the float32
  arithmetic: a pair that differs there is a drift source, which the drift envelope measures
  (1 vs 2 threads, another summation order), not a setting difference (a pair whose releases
  differ says which in its verdict line: releases.py);
- HORIZON (epochs, --max_steps, early stopping, --target_accuracy) is where a run stops:
  it matters for the final accuracy (seed regime), not for the per-step losses compared
  step by step in parity mode;
- every other setting must be equal, or the pair's verdict is `settings differ: ...`:
  the device's kind among them (a GPU run is never judged against a CPU run).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from algorithms.machine.devices import kind_of
from algorithms.records import DEVICE_BEFORE_COLUMN
from algorithms.session.settings_record import SEED, SPLITS, STOPS, THREADS_AND_KERNELS, synchronous  # noqa: F401

# THREADS_AND_KERNELS' device_detail: the device's model, driver and libraries (another CPU or
# GPU model: other kernels); STOPS: where a run stops
HORIZON = STOPS

# what a pair may differ in and still be judged: across seeds (the seed band), and in
# parity mode (the drift envelope, which compares step by step wherever the runs stop)
NOT_COMPARED_ACROSS_SEEDS = SEED + THREADS_AND_KERNELS
NOT_COMPARED_IN_PARITY = SEED + THREADS_AND_KERNELS + HORIZON


def same_seed_ignored(a: "Settings", b: "Settings") -> tuple:
    """What a same-seed pair may differ in: the seed regime's drift sources and stops, and,
    when both runs step synchronously, how the step is split (SPLITS: single against data
    over 2 devices, model, tensor or pipeline parallel, --accumulate): the same sums over
    the same global batch in another order, which is drift, as another thread count is."""
    if synchronous(a) and synchronous(b):
        return NOT_COMPARED_IN_PARITY + SPLITS
    return NOT_COMPARED_IN_PARITY


def split_line(a: "Settings", b: "Settings") -> Optional[str]:
    """What a same-seed pair says of a split that differs: judged as drift when both step
    synchronously; why not, when one does not."""
    differ = [(name, a.get(name), b.get(name)) for name in SPLITS if a.get(name) != b.get(name)]
    if not differ:
        return None
    text = "; ".join(f"{name} {value_text(x)} vs {value_text(y)}" for name, x, y in differ)
    if synchronous(a) and synchronous(b):
        return f"the step split otherwise ({text}): the same sums over the same global batch in another order, drift"
    asynchronous = next(settings.get("strategy") for settings in (a, b) if not synchronous(settings))
    return (
        f"--strategy {asynchronous} is no split of one synchronous step ({ASYNCHRONOUS_WHY.get(asynchronous, '')}): "
        "its updates are other steps, so no same-seed verdict; the seed regime judges it where a band exists"
    )


ASYNCHRONOUS_WHY = {
    "async": "Hogwild: each worker's update is computed on parameters others have moved since it read them",
    "ps": "each worker's gradient is applied alone, on parameters other workers have moved",
    "localsgd": "each replica steps alone on its share and the copies are averaged every --sync_every steps",
}


@dataclass(frozen=True)
class Settings:
    values: dict  # name -> value; a name that is absent is unknown
    recorded: bool = True  # False: an older file's, read from its rows

    def get(self, name: str):
        return self.values.get(name)

    def differences(self, other: "Settings", ignore: tuple = ()) -> list:
        """(name, mine, theirs) of every setting known on both sides that differs."""
        return [
            (name, value, other.values[name])
            for name, value in self.values.items()
            if name not in ignore and name in other.values and other.values[name] != value
        ]


def recorded(values: dict) -> Settings:
    """A settings record (or an envelope's settings) as the comparison reads it: one written
    before --fault had none, and one written before the device was recorded trained on the
    CPU (the CPU builds of requirements.txt were all there was)."""
    return Settings({"fault": None, "device": DEVICE_BEFORE_COLUMN, **values})


def from_rows(rows: list) -> Settings:
    """What an older file (no settings record) shows of its run's settings."""
    train = [row for row in rows if row["phase"] == "train"]
    first = rows[0]
    values = {
        "network": first["network"],
        "strategy": first["strategy"],
        "devices": first["devices"],
        "batch": (train or rows)[0]["global_batch"],
        "epochs": sum(1 for row in rows if row["phase"] == "val"),
        "fault": None,  # a file from before the settings record is from before --fault
        "device": kind_of(first["device"]),  # read_rows: "cpu" in a file from before the column
    }
    if len(set(epoch_batches(train).values())) == 1:
        values["batch_schedule"] = "none"
    rates = {row["learning_rate"] for row in train if row["learning_rate"] is not None}
    if len(rates) == 1:  # one rate on every step: no schedule, warm-up or plateau acted
        (values["learning_rate"],) = rates
        values["lr_schedule"] = "none"
        values["warmup_steps"] = 0
    return Settings(values, recorded=False)


def epoch_batches(train: list) -> dict:
    """epoch -> its global batch, from a run's train rows: the largest step of the epoch (a
    row says the rows its step trained on, so an epoch's short last step shows fewer)."""
    batches: dict = {}
    for row in train:
        batches[row["epoch"]] = max(batches.get(row["epoch"], 0), row["global_batch"])
    return batches


def from_key(config_key: tuple, epochs: int) -> Settings:
    """(network, global batch, strategy, devices) and the epochs: a Run built by hand."""
    network, batch, strategy, devices = config_key
    return Settings(
        {"network": network, "batch": batch, "strategy": strategy, "devices": devices, "epochs": epochs},
        recorded=False,
    )


def value_text(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def differences_line(differences: list) -> Optional[str]:
    """`settings differ: learning_rate 0.025 vs 0.05; batch 100 vs 1000`, or None."""
    if not differences:
        return None
    return "settings differ: " + "; ".join(
        f"{name} {value_text(mine)} vs {value_text(theirs)}" for name, mine, theirs in differences
    )


def unknown_line(a_label: str, a: Settings, b_label: str, b: Settings, ignore: tuple = ()) -> Optional[str]:
    """Which settings an older file leaves unknown, assumed equal to the other run's."""
    parts = [
        f"{label} ({'recorded' if settings.recorded else 'older file, no settings record'}) does not say "
        + ", ".join(sorted(set(other.values) - set(settings.values) - set(ignore)))
        for label, settings, other in ((a_label, a, b), (b_label, b, a))
        if set(other.values) - set(settings.values) - set(ignore)
    ]
    return ("unknown settings, assumed equal: " + "; ".join(parts)) if parts else None
