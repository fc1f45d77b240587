"""The network: what is trained, the same in every framework. The layer vocabulary
(layers.py), the networks as files (networks.py, network_file.py, onnx_network.py and the
built-in ones in network_files/), their numpy initial weights (weights.py), the shared
dropout uniforms (dropout.py), the parallel plan that says what each device holds
(parallel.py) and the known errors put in on purpose (variants.py)."""
