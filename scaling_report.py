"""Scaling report: run a parallel strategy at 1, 2, ... devices and see whether more devices pay.

python scaling_report.py --frameworks torch,tensorflow --devices 1,2 --max_steps 20
"""

import sys

from algorithms.studies.scaling import main

if __name__ == "__main__":
    sys.exit(main())
