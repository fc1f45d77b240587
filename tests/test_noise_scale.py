"""The gradient noise scale estimator (algorithms/session/noise_scale.py) on synthetic
gradients with a known answer: a true gradient G and a per-sample covariance Sigma
are drawn, each replica's gradient is G plus noise of covariance Sigma / B_small,
and the all-reduced gradient is their mean, exactly as data parallel makes them."""

import numpy as np
import pytest

from algorithms.session.noise_scale import GradientNorms, NoiseScale, replica_gradient_norms, unbiased_estimates

DIMENSIONS = 64
REPLICAS, B_SMALL = 2, 16


def synthetic_steps(trace: float, steps: int, seed: int):
    """GradientNorms of `steps` steps for |G|^2 = 1 and tr(Sigma) = trace."""
    rng = np.random.default_rng(seed)
    gradient = rng.normal(size=DIMENSIONS)
    gradient /= np.linalg.norm(gradient)
    variances = rng.uniform(0.5, 1.5, DIMENSIONS)
    variances *= trace / variances.sum()
    for _ in range(steps):
        replicas = gradient + rng.normal(size=(REPLICAS, DIMENSIONS)) * np.sqrt(variances / B_SMALL)
        summed = replicas.mean(axis=0)
        yield GradientNorms(
            B_SMALL, float((replicas**2).sum(axis=1).mean()), B_SMALL * REPLICAS, float(summed @ summed)
        )


@pytest.mark.parametrize("trace", [16.0, 256.0])
def test_each_steps_estimates_are_unbiased(trace):
    estimates = np.array([unbiased_estimates(norms) for norms in synthetic_steps(trace, 3000, seed=1)])
    gradient_sq, found_trace = estimates.mean(axis=0)
    assert gradient_sq == pytest.approx(1.0, rel=0.05)
    assert found_trace == pytest.approx(trace, rel=0.05)


def test_smoothed_b_simple_finds_the_known_noise_scale():
    for seed in range(3):
        estimator = NoiseScale()
        for norms in synthetic_steps(24.0, 400, seed):
            estimator.update(norms)
        # the EMA spans ~20 steps: its ratio scatters by about a fifth around tr(Sigma) / |G|^2
        assert estimator.b_simple == pytest.approx(24.0, rel=0.35), seed
        assert estimator.trace / estimator.gradient_sq == pytest.approx(estimator.b_simple)


def test_epoch_log_and_critical_batch_line():
    estimator = NoiseScale()
    for epoch in range(2):
        for norms in synthetic_steps(24.0, 200, seed=epoch):
            estimator.update(norms)
        estimator.end_epoch(epoch)
    text = estimator.describe()
    assert text.count("B_simple") == 2 and "epoch 2: B_simple" in text
    assert f"critical batch ≈ {estimator.b_simple:.0f}" in text


def test_noise_only_gradients_give_no_estimate_and_bad_batches_are_refused():
    estimator = NoiseScale()
    assert estimator.b_simple is None and "≈ n/a" in estimator.critical_batch_text()
    estimator.update(GradientNorms(16, 1.0, 32, 1.0))  # no sign of noise: tr(Sigma) estimate 0
    assert estimator.b_simple is None
    with pytest.raises(ValueError, match="B_small < B_big"):
        unbiased_estimates(GradientNorms(32, 1.0, 32, 1.0))


def test_replica_norms_become_the_per_replica_and_global_batch_norms():
    """4 replicas, two accumulated batches of 32: each replica's gradient is its share of the
    global mean (1/4 of its own batch's mean gradient), so the mean over replicas of its own
    batch's |g|^2 is 4 x the summed squared shares; a batch that does not split evenly gives
    no norms, without the framework computing them."""
    asked = []

    def squared_norms():
        asked.append(True)
        return 0.5, 0.25  # sum over replicas of |share|^2, |all-reduced gradient|^2

    assert replica_gradient_norms([32, 32], 4, squared_norms) == GradientNorms(16, 2.0, 64, 0.25)
    assert replica_gradient_norms([32, 30], 4, squared_norms) is None
    assert len(asked) == 1
