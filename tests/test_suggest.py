"""The one "did you mean" rule (``r1vision.suggest``) and that every refusal of a mistyped name uses it."""

from __future__ import annotations

from pathlib import Path

from r1vision.suggest import closest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "r1vision"


def test_closest_names_the_nearest_valid_name_or_none() -> None:
    assert closest("learnig_rate", ["lr_scheduler_type", "learning_rate"]) == "learning_rate"
    assert closest("xyz", ["learning_rate"]) is None
    assert closest("anything", []) is None  # a task without options
    # A stricter cutoff refuses a loose match the default accepts.
    assert closest("num_gen", ["num_generations"]) == "num_generations"
    assert closest("num_gen", ["num_generations"], cutoff=0.75) is None
    # Equally close names: the one that keeps the typed start wins, whatever the input order.
    assert closest("sgh", ["sgg", "svg"]) == closest("sgh", ["svg", "sgg"]) == "sgg"


def test_no_refusal_writes_its_own_suggestion_rule() -> None:
    own = [p.relative_to(PACKAGE) for p in PACKAGE.rglob("*.py") if "difflib" in p.read_text()]
    assert own == [Path("suggest.py")], f"use r1vision.suggest.closest instead of difflib in {own}"
