"""Caffe: the spec as prototxt (a NetParameter for training, one for deployment,
a SolverParameter), trained by Caffe's own solver over the shared batch order.
`build_caffe.sh` builds real pycaffe from the PyPI sdist (`make caffe`);
`prototxt.py` translates the spec; `train.py` runs it through algorithms/loop.py."""


def supported() -> dict:
    """What this wrapper implements (read before the framework is imported)."""
    return {"strategies": ("single",), "flags": ("--checkpoint_every",)}
