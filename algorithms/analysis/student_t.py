"""Student's t distribution's tail, for the seed-band tests (spread.py), in plain Python:
the analysis needs no statistics package beyond numpy. Checked against scipy's in the
tests."""

from __future__ import annotations

import math

_ITERATIONS = 300
_TINY = 1e-300
_EPSILON = 3e-16


def t_sf(t: float, df: float) -> float:
    """P(T > t) for T with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _regularized_beta(df / (df + t * t), df / 2.0, 0.5)
    return tail if t >= 0 else 1.0 - tail


def two_sided_p(t: float, df: float) -> float:
    return min(1.0, 2.0 * t_sf(abs(t), df))


def _regularized_beta(x: float, a: float, b: float) -> float:
    """I_x(a, b), by its continued fraction (Lentz's method) on the side where it converges fast."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(1.0 - x, b, a) / b


def _continued_fraction(x: float, a: float, b: float) -> float:
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    result = d
    for m in range(1, _ITERATIONS + 1):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + numerator / c
            c = c if abs(c) > _TINY else _TINY
            result *= c * d
        if abs(c * d - 1.0) < _EPSILON:
            break
    return result
