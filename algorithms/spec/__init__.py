"""The spec layer: what is trained, the same in every framework. The networks as data
(networks.py), their numpy initial weights (weights.py), the parallel plan that says what
each device holds (parallel.py), and the Kaggle data: files checked, loaded, split and
put in the shared batch order (input_files.py, data.py)."""
