#!/usr/bin/env python3
"""Crash soak: see pzq/chaos.py. Example: scripts/chaos.py --seconds 120 --kills 20"""

import sys

from pzq.chaos import main

sys.exit(main())
