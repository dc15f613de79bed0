"""The one compiled part of r1vision: an optional C accelerator for the SGG rewards' graph scans.

Everything else is in pyproject.toml. ``optional=True``: without a C compiler the install still succeeds
and the pure-Python builders run (same results, slower); see src/r1vision/compiled.py.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "r1vision._speedups",
            ["src/r1vision/_speedups.c"],
            # no fused multiply-adds: the geometry must round as numpy's separate operations do
            extra_compile_args=["-O2", "-ffp-contract=off"],
            optional=True,
        )
    ]
)
