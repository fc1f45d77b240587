"""The argparse types that check a flag's value on its own, each refusing a bad one in
one line (`whole_number`, `number` and the ones made of them; a schedule's EPOCH:VALUE
pairs), and a schedule written back as its flag is."""

from __future__ import annotations

import argparse
from typing import Callable


def checked(cast: Callable, accept: Callable, requirement: str) -> Callable:
    """An argparse type: `cast` of the text, refused in one line unless `accept`s it."""
    kind = "a whole number" if cast is int else "a number"

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        if not accept(value):
            raise argparse.ArgumentTypeError(f"must be {requirement}, got {text}")
        return value

    return parse


def whole_number(minimum: int) -> Callable:
    """An argparse type: a whole number of at least `minimum`."""
    return checked(int, lambda value: value >= minimum, f"{minimum} or more")


def number(accept: Callable, requirement: str) -> Callable:
    """An argparse type: a number (float) that `accept`s, `requirement` saying which."""
    return checked(float, accept, requirement)


positive = whole_number(1)


count = whole_number(0)


positive_number = number(lambda value: 0 < value < float("inf"), "a positive finite number")


fraction = number(lambda value: 0.0 <= value < 1.0, "in [0, 1)")


accuracy = number(lambda value: 0.0 < value <= 1.0, "in (0, 1]")


def image_shape(text: str) -> tuple:
    """An argparse type: HxWxC, e.g. 32x32x3, three whole numbers of 1 or more."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise argparse.ArgumentTypeError(f"expected HEIGHTxWIDTHxCHANNELS like 32x32x3, got {text!r}")
    return tuple(int(part) for part in parts)


def batch_size_or_auto(text: str):
    return "auto" if text == "auto" else positive(text)


def schedule_text(schedule: tuple) -> str:
    """((1, 128), (3, 256)) -> '1:128,3:256', as the flag is written."""
    return ",".join(f"{epoch}:{value:g}" for epoch, value in schedule)


def epoch_table(cast: Callable, flag: str) -> Callable:
    """An argparse type: '1:128,3:256' -> ((1, 128), (3, 256)): from each listed epoch
    (1-based) on, that value; epoch 1 first, epochs rising, values positive."""

    def parse(text: str) -> tuple:
        entries = []
        for item in text.split(","):
            epoch, colon, value = item.strip().partition(":")
            try:
                entry = (int(epoch), cast(value))
            except ValueError:
                raise argparse.ArgumentTypeError(f"expected EPOCH:VALUE pairs like 1:128,3:256, got {item.strip()!r}")
            if not colon or entry[1] <= 0 or entry[1] == float("inf"):
                raise argparse.ArgumentTypeError(f"{item.strip()!r}: the value after the epoch must be positive")
            entries.append(entry)
        epochs = [epoch for epoch, _ in entries]
        if epochs[0] != 1 or epochs != sorted(set(epochs)):
            raise argparse.ArgumentTypeError(
                f"{text!r}: the epochs must start at 1 and rise (e.g. 1:128,3:256,5:512 for {flag})"
            )
        return tuple(entries)

    return parse
