"""The geometry synthesiser's ``demo`` preset: polygon problems whose solutions the task's verifier accepts,
with rare and required shape-question pairs."""

from __future__ import annotations

import json
import random

import pytest

from r1vision.tasks.geometry.synth import synth_geometry
from r1vision.tasks.geometry.synth_polygons import SIDES, draw_polygon, problem
from r1vision.tasks.geometry.verify import answers_match


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("shape", sorted(SIDES))
@pytest.mark.parametrize("question", ["sides", "angle_sum", "interior", "perimeter"])
def test_every_solution_is_verified_against_its_answer(shape, question):
    text, answer, solution = problem(shape, question, side=7)
    n = SIDES[shape]
    expected = {"sides": n, "angle_sum": (n - 2) * 180, "interior": (n - 2) * 180 // n, "perimeter": 7 * n}
    assert answer == str(expected[question]) and text.startswith("<image>")
    assert answers_match(solution, answer) and not answers_match(solution, str(expected[question] + 1))


def test_excluded_pairs_are_rare_and_required_pairs_are_all(tmp_path):
    held = ["pentagon angle_sum", "hexagon interior"]
    never = _rows(synth_geometry(tmp_path, 400, seed=1, split="sft", preset="demo", exclude=held))
    assert len(never) == 400 and not {r["kind"] for r in never} & set(held)
    assert len({r["kind"] for r in never}) == 14  # the other pairs all occur
    ood = _rows(synth_geometry(tmp_path, 50, seed=1, split="test_ood", preset="demo", require=held))
    assert {r["kind"] for r in ood} == set(held)
    # the same seed and split give the same rows (the demo's data is reproducible)
    again = _rows(
        synth_geometry(tmp_path / "again", 50, seed=1, split="test_ood", preset="demo", require=held)
    )
    assert [r["solution"] for r in again] == [r["solution"] for r in ood]


def test_bad_pairs_and_presets_are_refused(tmp_path):
    with pytest.raises(ValueError, match="'pentagon area'"):
        synth_geometry(tmp_path, 4, preset="demo", exclude=["pentagon area"])
    with pytest.raises(ValueError, match="preset"):
        synth_geometry(tmp_path, 4, preset="toy")


def test_polygons_differ_by_their_number_of_sides():
    """Filled area grows with the number of sides at the same radius: the image carries the answer."""
    import numpy as np

    areas = {}
    for shape in SIDES:
        image = np.asarray(draw_polygon(shape, random.Random(0), 84).convert("L"))
        areas[shape] = int((image < 250).sum())
    assert areas["triangle"] < areas["square"] < areas["pentagon"] < areas["hexagon"]
