"""Verifications per second of the geometry answer checker, with and without the timeout machinery.

Modes (rows of the table):

- ``math-verify, no timeout``: ``parse``/``verify`` in-process with timeouts disabled (the baseline: what
  you get without any timeout machinery; unsafe on hostile input);
- ``math-verify, signal timeout``: the same with math-verify's own SIGALRM timeout (main thread only);
- ``answers_match, in-process``: our rules, then math-verify in-process without a deadline (``isolate=False``);
- ``answers_match, isolated``: the default: our rules, then math-verify in a killable worker subprocess;
- ``rules only``: our bounded in-house rules without math-verify.

Cases: ``numeric`` (the in-house rules decide, e.g. ``3.46`` vs ``2\\sqrt{3}``), ``symbolic`` (only
math-verify can decide, e.g. ``2x+2`` vs ``2(x+1)``) and ``wrong`` (every rule runs and fails). Each case is
made distinct so math-verify's parse cache does not flatter it.

    PYTHONPATH=src python benchmarks/bench_geometry_verify.py [--seconds 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import logging
import random
import time
from collections.abc import Callable

from r1vision.tasks.geometry import answers_match


def make_cases(kind: str, n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` distinct (prediction, solution) pairs of one kind."""
    rng = random.Random(f"{kind}-{seed}")
    cases = []
    for _ in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        if kind == "numeric":
            cases.append((f"So x is \\boxed{{{a}\\sqrt{{{b}}}}}", f"\\boxed{{\\sqrt{{{a * a * b}}}}}"))
        elif kind == "symbolic":
            cases.append((f"\\boxed{{{a}x+{a * b}}}", f"\\boxed{{{a}(x+{b})}}"))
        else:
            cases.append((f"\\boxed{{{a}x+{b}}}", f"\\boxed{{{a}(x+{b + 1})}}"))
    return cases


def _mv(timeout: int | None) -> Callable[[str, str], bool]:
    from math_verify import parse, verify

    def check(pred: str, sol: str) -> bool:
        g, p = parse(sol, parsing_timeout=timeout), parse(pred, parsing_timeout=timeout)
        return bool(verify(g, p, timeout_seconds=timeout))

    return check


MODES: dict[str, Callable[[], Callable[[str, str], bool]]] = {
    "math-verify, no timeout": lambda: _mv(None),
    "math-verify, signal timeout": lambda: _mv(5),
    "answers_match, in-process": lambda: lambda p, s: answers_match(p, s, isolate=False),
    "answers_match, isolated": lambda: lambda p, s: answers_match(p, s),
    "rules only": lambda: lambda p, s: answers_match(p, s, use_math_verify=False),
}


def rate(check: Callable[[str, str], bool], cases: list[tuple[str, str]], seconds: float) -> float:
    """Verifications per second over at most ``seconds`` (at least 20 calls)."""
    start, done = time.perf_counter(), 0
    for pred, sol in cases:
        check(pred, sol)
        done += 1
        if done >= 20 and time.perf_counter() - start > seconds:
            break
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per cell and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best rate is kept")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify warns on every call with timeouts disabled
    answers_match("\\boxed{x+1}", "1+x")  # start the worker outside the timed part
    kinds = ("numeric", "symbolic", "wrong")
    checks = {mode: factory() for mode, factory in MODES.items()}
    for check in checks.values():
        for pred, sol in make_cases("wrong", 10, seed=99) + make_cases("symbolic", 10, seed=99):
            check(pred, sol)  # warm lazy imports and code paths
    # Rounds interleave the modes so that load from other processes hits them alike; keep the best.
    table: dict[str, dict[str, float]] = {mode: dict.fromkeys(kinds, 0.0) for mode in checks}
    for round_ in range(args.rounds):
        for mode, check in checks.items():
            for k in kinds:
                cases = make_cases(k, 5000, seed=round_ * 100 + len(mode))
                table[mode][k] = max(table[mode][k], rate(check, cases, args.seconds))
    base = table["math-verify, no timeout"]
    print(f"{'mode':30s}" + "".join(f"{k + ' /s':>14s}{'ratio':>8s}" for k in kinds))
    for mode, rates in table.items():
        cells = "".join(f"{rates[k]:14.1f}{rates[k] / base[k]:8.2f}" for k in kinds)
        print(f"{mode:30s}{cells}")
    print("ratio = rate / rate of 'math-verify, no timeout' (the same check with no timeout machinery)")


if __name__ == "__main__":
    main()
