"""The registry: the frameworks the commands run (frameworks.py), what each wrapper runs
(capabilities.py, read from its supported()), and the environments beside the main one:
the legacy venv and Caffe (legacy_env.py, environments.py)."""
