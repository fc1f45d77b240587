"""PyTorch training: a plain loop driven by the shared batch order."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.init import initial_weights
from algorithms.loop import train_by_hand
from torch_wrapper.model import build_model, make_optimizer


def describe_runtime():
    devices = f"cpu ({torch.get_num_threads()} threads)"
    return "torch", "torch", {"torch": torch.__version__, "numpy": np.__version__}, devices


class TorchTrainer:
    def __init__(self, network, optimizer_spec, seed: int):
        torch.manual_seed(seed)  # dropout masks
        self.model = build_model(network, initial_weights(network, seed))
        self.optimizer = make_optimizer(optimizer_spec, self.model.parameters())

    def to_batch(self, images, labels):
        return torch.from_numpy(images[:, None]), torch.from_numpy(labels.astype(np.int64))

    def train_step(self, batch):
        images, labels = batch
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        logits = self.model(images)
        loss = F.cross_entropy(logits, labels)
        loss.backward()
        self.optimizer.step()
        accuracy = (logits.argmax(dim=1) == labels).float().mean()
        return loss.item(), accuracy.item()

    @torch.no_grad()
    def logits(self, images):
        self.model.eval()
        return self.model(torch.from_numpy(images[:, None])).numpy()


def train(session):
    config = session.config
    return train_by_hand(TorchTrainer(config.network, config.optimizer, config.seed), session)


@torch.no_grad()
def initial_loss_and_logits(network, images, labels, seed: int = 0) -> tuple:
    """PyTorch's own cross-entropy and the logits of the shared initial weights, dropout off."""
    model = build_model(network, initial_weights(network, seed)).eval()
    logits = model(torch.from_numpy(images[:, None]))
    return float(F.cross_entropy(logits, torch.from_numpy(labels.astype(np.int64)))), logits.numpy()
