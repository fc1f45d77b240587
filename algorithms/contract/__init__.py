"""The wrapper contract: everything the shared code asks of a framework wrapper, as
code (types.py); its checker, which lists the ways a wrapper package breaks it
(check.py, `python -m algorithms.contract PACKAGE`); and the parts of a wrapper's
Support several declare alike (shared_support.py)."""
