"""python -m algorithms.contract PACKAGE...: the ways each wrapper package breaks the
contract (check.py); exit status 1 if any."""

from algorithms.contract.check import main

raise SystemExit(main())
