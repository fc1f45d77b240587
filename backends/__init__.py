"""What several wrappers need about one framework, once per framework: thread
switches, determinism switches, profiler readers, the Theano bridges. Every wrapper
that runs on a framework imports its helpers from here (Keras on torch and
torch_wrapper both from torch_backend.py); a module here imports no wrapper.

    torch_backend.py       threads (intra- and inter-op), deterministic kernels, torch.profiler ops,
                           CUDA peak memory
    tensorflow_backend.py  threads (intra- and inter-op pools), op determinism, local devices
                           (GPUs or logical CPUs), GPU peak memory
    jax_backend.py         XLA's determinism flag
    theano_backend.py      THEANO_FLAGS and the theano-pymc bridges for Lasagne 0.1 and
                           Keras 2.3.1 (import before either), Theano's determinism
    openblas.py            the OpenBLAS Theano and Caffe link: its best core for this CPU named
                           before it loads, and the core that ran, for the device's detail
    xplane.py              the XSpace a TensorFlow or jax profiler writes, read back
    xla.py                 XLA's flags (TensorFlow, jax): one thread, the HLO dump of a profile
    tuning.py              the --tuned settings several wrappers share, and their list variables
"""
