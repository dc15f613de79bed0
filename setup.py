"""r1vision's compiled parts: optional C accelerators for the SGG rewards' graph scans and the SVG score's
image filters.

Everything else is in pyproject.toml. ``optional=True``: without a C compiler the install still succeeds
and the pure-Python paths run (same results, slower); see src/r1vision/compiled.py and
src/r1vision/tasks/svg/score.py.
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
        ),
        Extension(
            # in the SVG folder: the render workers load that folder alone, as a private package
            "r1vision.tasks.svg._fastscore",
            ["src/r1vision/tasks/svg/_fastscore.c"],
            # -O3 vectorises the per-pixel loops (no reassociation: the sums keep numpy's order)
            extra_compile_args=["-O3", "-ffp-contract=off"],
            optional=True,
        ),
    ]
)
