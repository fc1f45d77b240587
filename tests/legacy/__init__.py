"""Tests run in the legacy environment (.venv-legacy/bin/python -m pytest tests/legacy):
the Theano bridges and real Lasagne and Keras-on-Theano training runs."""
