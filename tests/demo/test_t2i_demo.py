"""`r1vision demo --task t2i --quick`: the text-to-image demo's whole path (build, score, train, score, table)."""

from __future__ import annotations

import json

import pytest

from r1vision.cli import main


@pytest.mark.slow
def test_quick_t2i_demo_writes_its_table(tmp_path):
    assert main(["demo", "--task", "t2i", "--quick", "--quiet", "--output_dir", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "t2i" / "eval.json").read_text())
    assert result["torch_threads"] == 1 and result["steps"] == 20 and len(result["results"]) == 1
    seed = result["results"][0]
    assert 0.0 <= seed["before"] <= 1.0 and 0.0 <= seed["after"] <= 1.0
    assert "held-out reward before" in (tmp_path / "t2i" / "eval_table.md").read_text()
