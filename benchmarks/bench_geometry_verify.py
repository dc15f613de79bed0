"""Verifications per second of the geometry answer checker against plain math-verify, and pathological latency.

Modes (rows of the table):

- ``math-verify, no timeout`` (the baseline): ``parse``/``verify`` in-process with timeouts disabled, i.e.
  plain math-verify with no timeout machinery (unsafe on hostile input);
- ``math-verify, signal timeout``: the same with math-verify's own SIGALRM timeout (main thread only);
- ``answers_match, isolated``: the default: in-house rules, math-verify in a killable worker subprocess
  only when the rules cannot tell the answers apart;
- ``answers_match, in-process``: the same, math-verify in-process without a deadline (``isolate=False``);
- ``rules only``: the bounded in-house rules without math-verify.

Cases: ``mix`` is a realistic training mix: 70 % wrong answers (most answers early in training), 30 %
correct, in the answer shapes of geometry3k / MAYE (integers, decimals, fractions, radicals, degrees,
option letters, expressions in x), each in a short reasoning text ending in ``\\boxed{}``; ``numeric``
(correct, the rules decide: ``2\\sqrt{3}`` vs ``\\sqrt{12}``), ``symbolic`` (correct: ``2x+4`` vs
``2(x+2)``), ``wrong`` (wrong expressions in x) and ``undecided`` (``\\sin x+3`` vs ``3+\\sin(x)``: beyond the
in-house parser, so the isolated mode pays a subprocess round trip). Each case is distinct so math-verify's parse cache
does not flatter it. The mix also reports agreement with the labels it was built with.

Then the latency of a pathological answer (``\\boxed{9^{9^{9^{9}}}}``) with the default deadline, called
from a non-main thread with a warm worker, several times in a row.

    PYTHONPATH=src python benchmarks/bench_geometry_verify.py [--seconds 1] [--rounds 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import threading
import time
from collections.abc import Callable

from r1vision.tasks.geometry import answers_match
from r1vision.tasks.geometry.isolation import get_pool
from r1vision.tasks.geometry.verify import DEFAULT_TIMEOUT_S

_FILLER = (
    "Let the triangle be ABC with the given sides. By the Pythagorean theorem the missing side follows, "
    "and the angle sum of a triangle is 180 degrees. Substituting the values, we get"
)


def _mix_case(rng: random.Random) -> tuple[str, str, bool]:
    """One (completion, solution, is_correct) pair of the training mix."""
    correct = rng.random() < 0.3
    a, b, c = rng.randint(2, 60), rng.randint(2, 30), rng.randint(1, 9)
    shape = rng.choice(("int", "decimal", "frac", "radical", "degree", "letter", "expr", "unit"))
    d = rng.choice((-2, -1, 1, 3))  # how a wrong answer is off
    if shape == "int":
        gold, pred = str(a), str(a if correct else a + d)
    elif shape == "decimal":
        gold = f"{a / 7:.2f}"
        pred = f"{a / 7:.4f}" if correct else f"{(a + d) / 7:.2f}"
    elif shape == "frac":
        gold, pred = f"\\frac{{{a}}}{{{b}}}", (f"{a}/{b}" if correct else f"\\frac{{{a + d}}}{{{b}}}")
    elif shape == "radical":
        gold = f"{c}\\sqrt{{{b}}}"
        pred = f"\\sqrt{{{c * c * b}}}" if correct else f"{c + 1}\\sqrt{{{b}}}"
    elif shape == "degree":
        gold, pred = str(a), (f"{a}^\\circ" if correct else f"{a + d}^\\circ")
    elif shape == "letter":
        gold, pred = rng.choice("ABCD"), None
        pred = gold if correct else "ABCD"[("ABCD".index(gold) + 1) % 4]
    elif shape == "expr":
        gold = f"{c}x+{c * b}"
        pred = f"{c}(x+{b})" if correct else f"{c}(x+{b + 1})"
    else:
        gold, pred = str(a), (f"{a}\\text{{ cm}}" if correct else f"{a + d} cm")
    # the solution as MAYE's datasets write it ("solution": "\\boxed{20}"), which math-verify can parse
    return (
        f"{_FILLER} {rng.randint(1, 999)}. So the answer is $\\boxed{{{pred}}}$.",
        f"\\boxed{{{gold}}}",
        correct,
    )


def make_cases(kind: str, n: int, seed: int = 0) -> list[tuple[str, str, bool]]:
    """``n`` distinct (prediction, solution, expected) triples of one kind."""
    rng = random.Random(f"{kind}-{seed}")
    cases = []
    for _ in range(n):
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        if kind == "mix":
            cases.append(_mix_case(rng))
        elif kind == "numeric":
            cases.append((f"So x is \\boxed{{{a}\\sqrt{{{b}}}}}", f"\\boxed{{\\sqrt{{{a * a * b}}}}}", True))
        elif kind == "symbolic":
            cases.append((f"\\boxed{{{a}x+{a * b}}}", f"\\boxed{{{a}(x+{b})}}", True))
        elif kind == "undecided":  # beyond the in-house parser (functions): only math-verify decides
            cases.append((f"\\boxed{{\\sin x+{a}}}", f"\\boxed{{{a}+\\sin(x)}}", True))
        else:
            cases.append((f"\\boxed{{{a}x+{b}}}", f"\\boxed{{{a}(x+{b + 1})}}", False))
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
    "answers_match, isolated": lambda: lambda p, s: answers_match(p, s),
    "answers_match, in-process": lambda: lambda p, s: answers_match(p, s, isolate=False),
    "rules only": lambda: lambda p, s: answers_match(p, s, use_math_verify=False),
}
BASELINE = "math-verify, no timeout"


def rate(check: Callable[[str, str], bool], cases: list[tuple[str, str, bool]], seconds: float) -> float:
    """Verifications per second over at most ``seconds`` (at least 20 calls)."""
    start, done = time.perf_counter(), 0
    for pred, sol, _ in cases:
        check(pred, sol)
        done += 1
        if done >= 20 and time.perf_counter() - start > seconds:
            break
    return done / (time.perf_counter() - start)


def agreement(check: Callable[[str, str], bool], cases: list[tuple[str, str, bool]]) -> float:
    """Share of cases where ``check`` returns the label the case was built with."""
    return sum(check(p, s) == e for p, s, e in cases) / len(cases)


def pathological_latency(repeats: int) -> list[float]:
    """Seconds per pathological call from a non-main thread, each with a warm worker waiting."""
    pool, times = get_pool(), []
    for _ in range(repeats):
        deadline = time.monotonic() + 60
        while pool.warm() < 1 and time.monotonic() < deadline:
            time.sleep(0.05)  # the killed worker's replacement starts in the background
        thread = threading.Thread(target=_timed_pathological_call, args=(times,))
        thread.start()
        thread.join()
    return times


def _timed_pathological_call(times: list[float]) -> None:
    start = time.perf_counter()
    assert answers_match("\\boxed{9^{9^{9^{9}}}}", "\\boxed{9^{9^{9^{8}}}}") is False
    times.append(time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time budget per cell and round")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the best rate is kept")
    parser.add_argument("--pathological", type=int, default=3, help="pathological calls timed")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # math-verify warns on every call with timeouts disabled
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    answers_match("\\boxed{x+1}", "1+x")  # start the worker outside the timed part
    answers_match("\\boxed{\\sin x}", "\\sin(x)")
    kinds = ("mix", "numeric", "symbolic", "wrong", "undecided")
    checks = {mode: factory() for mode, factory in MODES.items()}
    for check in checks.values():
        for pred, sol, _ in make_cases("mix", 20, seed=99) + make_cases("symbolic", 10, seed=99):
            check(pred, sol)  # warm lazy imports and code paths
    # Rounds interleave the modes so that load from other processes hits them alike; keep the best.
    table: dict[str, dict[str, float]] = {mode: dict.fromkeys(kinds, 0.0) for mode in checks}
    for round_ in range(args.rounds):
        for mode, check in checks.items():
            for k in kinds:
                cases = make_cases(k, 5000, seed=round_ * 100 + len(mode))
                table[mode][k] = max(table[mode][k], rate(check, cases, args.seconds))
    labelled = make_cases("mix", 300, seed=7)
    agree = {mode: agreement(check, labelled) for mode, check in checks.items()}
    base = table[BASELINE]
    print(f"load average at start: {load:.2f} (2 cores shared with other processes)")
    print()
    print("| mode | " + " | ".join(f"{k} /s | ratio" for k in kinds) + " | mix: agrees with label |")
    print("|---|" + "---|---|" * len(kinds) + "---|")
    for mode, rates in table.items():
        cells = " | ".join(f"{rates[k]:.1f} | {rates[k] / base[k]:.2f}" for k in kinds)
        print(f"| {mode} | {cells} | {agree[mode]:.3f} |")
    print()
    print(f"ratio = rate / rate of '{BASELINE}' in the same run; mix = 70 % wrong, 30 % correct answers")
    if args.pathological > 0:
        times = pathological_latency(args.pathological)
        print(
            f"pathological answer from a non-main thread, warm worker, deadline {DEFAULT_TIMEOUT_S} s: "
            + ", ".join(f"{t:.2f} s" for t in times)
            + f" (max {max(times):.2f} s)"
        )


if __name__ == "__main__":
    main()
