"""The wrapper contract: everything the shared code asks of a framework wrapper, as
code (types.py), and the parts of a wrapper's Support several declare alike
(shared_support.py)."""
