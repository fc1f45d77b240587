"""PyTorch: the spec as an nn.Sequential (NCHW), trained by a plain loop.
`model.py` translates the spec, `train.py` runs it through the shared loop in
algorithms/loop.py."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single",), "flags": ()}
