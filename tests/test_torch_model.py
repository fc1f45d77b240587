"""torch_wrapper's fast build (padding folded into the convolution, ReLU after the
max-pool, in-place ReLUs, channels-last weights) computes what the spec's layers,
built one by one, compute."""

import pytest
import torch
import torch.nn.functional as F

from algorithms.network.weights import initial_weights
from algorithms.network.networks import NETWORKS
from torch_wrapper.model import build_model, layer_modules


def loss_and_gradients(model, images, labels):
    loss = F.cross_entropy(model(images), labels)
    loss.backward()
    return loss.item(), [parameter.grad for parameter in model.parameters()]


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_fused_layers_give_the_same_loss_and_gradients_as_the_spec_layers(name):
    network = NETWORKS[name].without_dropout()
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(32, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (32,), generator=generator)

    def model(fused):
        modules = layer_modules(network, initial_weights(network, 0), fused=fused)
        return torch.nn.Sequential(*[module for parts in modules for module in parts])

    plain, fused = model(False), model(True)
    assert [type(m) for m in fused] != [type(m) for m in plain]  # really rebuilt
    assert fused[0].weight.is_contiguous(memory_format=torch.channels_last)
    plain_loss, plain_gradients = loss_and_gradients(plain, images, labels)
    # in the spec's layout (NCHW) the rebuilt layers do the same arithmetic, bit for bit
    same_layout_loss, same_layout_gradients = loss_and_gradients(
        fused.to(memory_format=torch.contiguous_format), images, labels
    )
    assert same_layout_loss == plain_loss
    for plain_gradient, gradient in zip(plain_gradients, same_layout_gradients, strict=True):
        assert torch.equal(plain_gradient, gradient)
    # channels-last (what the wrapper trains) only changes the convolutions' summation
    # order (norms, not elements: a 1e-7 change may move a max-pool's pick to its near-tie)
    fast_loss, fast_gradients = loss_and_gradients(build_model(network, initial_weights(network, 0)), images, labels)
    assert fast_loss == pytest.approx(plain_loss, rel=1e-6)
    for plain_gradient, fast_gradient in zip(plain_gradients, fast_gradients, strict=True):
        assert torch.linalg.norm(fast_gradient - plain_gradient) <= 1e-3 * torch.linalg.norm(plain_gradient)


def test_the_bias_and_summed_loss_faults_build_what_they_say(tmp_path):
    """--fault bias:3 builds conv 3 without a bias (one parameter tensor fewer, the others
    loaded as the spec's); --fault loss:sum's first SGD step moves every weight by the
    batch size times the mean loss's step, while the step's logged loss stays the mean."""
    from algorithms.config.run_config import parse_config
    from torch_wrapper.trainer import build_trainer

    train = tmp_path / "train.csv"
    rows = [f"{i % 10}," + ",".join(str((i * 7 + j) % 256) for j in range(784)) for i in range(16)]
    train.write_text("label," + ",".join(f"pixel{j}" for j in range(784)) + "\n" + "\n".join(rows) + "\n")
    flags = ["--train", str(train), "--parity", "--batch_size", "8", "--threads", "1"]
    images = torch.rand(8, 28, 28, generator=torch.Generator().manual_seed(1)).numpy()
    labels = torch.arange(8).numpy() % 10

    def first_step(extra):
        trainer = build_trainer(parse_config(flags + extra, "t", ""))
        before = [p.detach().clone() for p in trainer.model.parameters()]
        result = trainer.step([trainer.to_batch(images, labels, ())])  # --parity: no dropout, no uniforms
        return result.loss, [p.detach() - b for p, b in zip(trainer.model.parameters(), before)], trainer.model

    mean_loss, mean_moves, model = first_step([])
    summed_loss, summed_moves, _ = first_step(["--fault", "loss:sum"])
    assert summed_loss == pytest.approx(mean_loss, rel=1e-6)
    for mean_move, summed_move in zip(mean_moves, summed_moves, strict=True):
        torch.testing.assert_close(summed_move, 8 * mean_move, rtol=1e-4, atol=1e-7)

    _, _, no_bias = first_step(["--fault", "bias:3"])
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert [tuple(p.shape) for p in no_bias.parameters()] == shapes[:3] + shapes[4:]  # conv 3's (48,) bias gone
    assert shapes[3] == (48,)
