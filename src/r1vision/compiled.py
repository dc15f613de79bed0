"""r1vision's optional compiled helpers (``_speedups.c``), or None for each when they are not built.

They are built at install when a C compiler is present (``setup.py``; the install succeeds without one)
and are switched off by ``R1VISION_PURE_PYTHON=1``. Every caller keeps a pure-Python path that gives the
same results (``tests/test_compiled.py`` holds the two equal) and reads these names through this module
at call time, so a test can switch them off:

- ``scan_answer`` / ``scan_truth``: the SGG answer and ground-truth builders' clean path;
- ``pair_geometry``: the SGG matching geometry of a chunk of rows;
- ``relation_hits``: the SGG edge scores' join of predicted and GT relations;
- ``has_long_digit_run``: :mod:`r1vision.tasks.fastjson`'s check for integers orjson would turn to floats.
"""

from __future__ import annotations

import os

try:
    if os.environ.get("R1VISION_PURE_PYTHON", "") not in ("", "0"):
        raise ImportError("R1VISION_PURE_PYTHON is set")
    from r1vision._speedups import has_long_digit_run, pair_geometry, relation_hits, scan_answer, scan_truth
except ImportError:
    scan_answer = scan_truth = pair_geometry = relation_hits = has_long_digit_run = None

AVAILABLE = scan_answer is not None

__all__ = ["AVAILABLE", "has_long_digit_run", "pair_geometry", "relation_hits", "scan_answer", "scan_truth"]
