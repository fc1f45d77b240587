"""PyTorch: the spec as an nn.Sequential (NCHW), trained by a plain loop.
`model.py` translates the spec, `train.py` runs it through the shared loop in
algorithms/loop.py."""
