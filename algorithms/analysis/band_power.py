"""How the baseline check (spread.reproduction_test and its two rules) answers with
3, 5 and 9 seeds in its band: real runs, resampled, as they are and with a change
planted in the run judged.

    python -m algorithms.analysis.band_power [--baseline results/baseline/default] [--subsets 20]

Each framework with ten shipped seeds: every seed in turn is the run judged, and its
band is every 9 of the others, or --subsets of their 3- and 5-seed subsets (a fixed
draw). The run is judged as it is (the null: `outside` is a false alarm, `not checked`
a verdict lost to too few seeds), and planted: its final validation accuracy lowered by
k of its framework's seed standard deviations, its loss curve scaled, or the run put at
chance (the accuracy 1/classes, every loss ln(classes)); the last once more with the
at-chance rule off, to show what the prediction interval alone would say. Printed: the
share called outside / not checked / within, per plant and band size.

A band of ten cannot be resampled from ten seeds with one held out; the same test on
normal draws (`--model`: seeds' accuracies N(0, 1), the run's N(k, 1), its curve
statistic a null draw) gives the rule's power at 3, 5 and 10 seeds on its own model.
"""

from __future__ import annotations

import argparse
import itertools
import math
import sys
from dataclasses import replace

import numpy as np

from algorithms.errors import EXIT_INPUT_ERROR
from algorithms.analysis import spread
from algorithms.analysis.false_alarms import DEFAULT_FOLDER, DEFAULT_NETWORK, seeds_by_framework
from algorithms.analysis.spread import ACCURACY, CURVE, Statistic, reproduction_test
from algorithms.network.networks import get_network

BAND_SIZES = (3, 5, 9)
MODEL_SIZES = (3, 5, 10)
ACCURACY_SHIFTS_SD = (4, 8, 16)  # in the framework's seed standard deviations
LOSS_FACTORS = (1.1, 1.5)
OUTCOMES = ("outside", "not checked", "within")


def outcome(test) -> str:
    if test.beyond:
        return "outside"
    return "not checked" if test.undecided else "within"


def plants(seeds: list, classes: int) -> dict:
    """name -> a function of the judged run giving the planted run."""
    sd = float(np.std([run.final_val_accuracy for run in seeds], ddof=1))

    def accuracy(k):
        return lambda run: replace(run, val=run.val[:-1] + [(*run.val[-1][:2], run.final_val_accuracy - k * sd)])

    def losses(factor):
        return lambda run: replace(run, losses=run.losses * factor)

    def at_chance(run):
        flat = np.full(len(run.losses), math.log(classes))
        return replace(run, losses=flat, val=run.val[:-1] + [(run.val[-1][0], math.log(classes), 1.0 / classes)])

    named = {"as it is (null)": lambda run: run}
    named.update({f"val accuracy -{k} seed sd": accuracy(k) for k in ACCURACY_SHIFTS_SD})
    named.update({f"every loss x{factor:g}": losses(factor) for factor in LOSS_FACTORS})
    named["at chance"] = at_chance
    return named


def bands(others: list, size: int, subsets: int, rng: np.random.Generator) -> list:
    every = list(itertools.combinations(others, size))
    if len(every) <= subsets:
        return every
    return [every[i] for i in sorted(rng.choice(len(every), subsets, replace=False))]


def measure(groups: dict, subsets: int, classes: int) -> dict:
    """(plant, band size) -> {outcome: count}; 'at chance, rule off' judged without the at-chance rule."""
    rng = np.random.default_rng(0)
    counts = {}
    for by_seed in groups.values():
        seeds = [by_seed[seed] for seed in sorted(by_seed)]
        named = plants(seeds, classes)
        for judged in seeds:
            others = [run for run in seeds if run is not judged]
            for size in BAND_SIZES:
                for band in bands(others, size, subsets, rng):
                    for name, plant in named.items():
                        _count(counts, (name, size), outcome(reproduction_test(plant(judged), list(band))))
                    test = reproduction_test(named["at chance"](judged), list(band), chance_rule=False)
                    _count(counts, ("at chance, rule off", size), outcome(test))
    return counts


def _count(counts: dict, key: tuple, word: str) -> None:
    counts.setdefault(key, dict.fromkeys(OUTCOMES, 0))[word] += 1


def model(draws: int) -> dict:
    """(shift in sd, seeds) -> {outcome: count} of the test on normal draws (no chance rule)."""
    rng = np.random.default_rng(1)
    counts = {}
    for seeds in MODEL_SIZES:
        scale = math.sqrt(1 + 1 / seeds)
        for shift in (0,) + ACCURACY_SHIFTS_SD:
            for _ in range(draws):
                values, curve_null = rng.standard_normal(seeds), rng.standard_normal(seeds)
                run, run_curve = shift + rng.standard_normal(), rng.standard_normal()
                curve_t = (run_curve - curve_null.mean()) / (curve_null.std(ddof=1) * scale)
                accuracy_t = (values.mean() - run) / (values.std(ddof=1) * scale)
                statistics = [
                    Statistic(CURVE, curve_t, seeds - 1, False, scale),
                    Statistic(ACCURACY, accuracy_t, seeds - 1, True, scale),
                ]
                test = spread.finished(statistics, [], seeds, f"{spread.TAIL_DF + 1} seeds", None)
                _count(counts, (f"val accuracy -{shift} sd" if shift else "as it is (null)", seeds), outcome(test))
    return counts


def format_counts(counts: dict, sizes: tuple, title: str) -> str:
    lines = [title, f"  {'the run judged':<28}" + "".join(f"{f'{size} seeds':>28}" for size in sizes)]
    lines.append(f"  {'':<28}" + f"{'outside / not chk / within':>28}" * len(sizes))
    for name in dict.fromkeys(name for name, _ in counts):
        cells = []
        for size in sizes:
            count = counts.get((name, size))
            total = sum(count.values()) if count else 0
            cells.append(" / ".join(f"{count[word] / total:.3f}" for word in OUTCOMES) if total else "-")
        lines.append(f"  {name:<28}" + "".join(f"{cell:>28}" for cell in cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m algorithms.analysis.band_power", description=__doc__)
    parser.add_argument("--baseline", default=DEFAULT_FOLDER, help="a folder of baselines at one setting")
    parser.add_argument("--network", default=DEFAULT_NETWORK)
    parser.add_argument("--subsets", type=int, default=20, help="3- and 5-seed bands drawn per judged run")
    parser.add_argument("--model", type=int, default=20000, help="normal draws per cell of the model's table")
    args = parser.parse_args(argv)
    classes = get_network(args.network).num_classes
    groups = {
        name: by_seed for name, by_seed in seeds_by_framework(args.baseline, args.network).items() if len(by_seed) >= 10
    }
    if not groups:
        print(
            f"error: {args.baseline}: no framework with 10 or more seeds; give --baseline a folder of ten "
            "(make baseline writes them to results/baseline/default)",
            file=sys.stderr,
        )
        return EXIT_INPUT_ERROR
    counts = measure(groups, args.subsets, classes)
    print(
        format_counts(
            counts, BAND_SIZES, f"the baseline check on {len(groups)} frameworks' real seeds ({', '.join(groups)})"
        )
    )
    print()
    print(format_counts(model(args.model), MODEL_SIZES, "the same test on normal draws (no at-chance rule)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
