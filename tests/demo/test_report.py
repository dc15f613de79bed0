"""The demo's verdicts and the flat-curve check."""

from __future__ import annotations

from r1vision.demo.report import is_flat, verdict_lines


def test_flat_curve_and_plain_verdicts():
    assert is_flat([1.0, 1.01, 0.99, 1.0, 1.02, 1.0, 0.98, 1.01])
    assert not is_flat([0.5, 0.6, 0.8, 1.0, 1.2, 1.4, 1.5, 1.6])

    def run(sft, matched, grpo):
        arms = {"sft": {"relation_recall": sft}, "sft_matched": {"relation_recall": matched},
                "sft+grpo": {"relation_recall": grpo}}  # fmt: skip
        return {"seed": 0, "eval": {"test": arms, "test_ood": arms}, "reward_curve_flat": True}

    lines = verdict_lines([run(0.20, 0.30, 0.26)])
    assert "+6.0 points over its SFT checkpoint (meets" in lines[0]
    assert "RL does NOT beat compute-matched SFT" in lines[0]
    assert "stayed flat" in lines[-1]
    # Ahead on average, but one seed disagrees: not called a win.
    mixed = verdict_lines([run(0.20, 0.20, 0.25), run(0.20, 0.22, 0.21)])
    assert "ahead on average but not on every seed (+5.0, -1.0)" in mixed[0]
    assert "RL beats compute-matched SFT on every seed" in verdict_lines([run(0.2, 0.2, 0.25)] * 2)[0]
