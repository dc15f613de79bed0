"""`r1vision selftest` and `r1vision demo --quick` run end to end and report honestly."""

import json

from r1vision import selftest
from r1vision.demo import main as demo_main


def test_selftest_passes_here(capsys):
    assert selftest.main(["--layout", "single"]) == 0
    out = capsys.readouterr().out
    assert out.count("PASS") == 4 and "4/4 checks passed" in out


def test_selftest_fails_on_version_mismatch(monkeypatch, capsys):
    from r1vision import versions

    monkeypatch.setitem(versions.TESTED, "trl", "0.0.1")
    assert selftest._check("versions", selftest._versions) is False
    assert "outside the tested matrix: trl" in capsys.readouterr().out


def test_demo_quick(tmp_path, capsys):
    assert demo_main(["--quick", "--out", str(tmp_path / "demo")]) == 0
    result = json.loads((tmp_path / "demo" / "eval.json").read_text())
    assert set(result) == {"sft", "sft+grpo"}
    assert "reward/accuracy" in result["sft"]
    assert (tmp_path / "demo" / "eval_table.md").read_text().startswith("| metric | SFT | SFT + GRPO |")
