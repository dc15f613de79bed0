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


def test_verdict_says_when_outputs_do_not_depend_on_the_input(tmp_path):
    import json

    from r1vision.demo.report import distinct_share

    pred = tmp_path / "pred"
    pred.mkdir()
    texts = ["<svg>A</svg>", "<svg>A</svg> ", "<svg>A</svg>", "<svg>B</svg>"]
    with (pred / "shard-0.jsonl").open("w") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"index": i, "completion": text}) + "\n")
    assert distinct_share(pred) == 0.5  # trailing whitespace is the same output

    def run(distinct_grpo):
        arm = lambda d: {"reward": 0.2, "distinct": d}  # noqa: E731
        arms = {"sft": arm(0.125), "sft_matched": arm(0.9), "sft+grpo": arm(distinct_grpo)}
        return {"seed": 0, "eval": {"test": arms, "test_ood": arms}}

    lines = verdict_lines([run(0.25)], headline="reward")
    flagged = [line for line in lines if "distinct outputs" in line]
    assert len(flagged) == 2 and "SFT checkpoint 12%" in flagged[0] and "SFT + GRPO 25%" in flagged[0]
    assert "SFT continued" not in flagged[0]  # 90% distinct: reads its input
    # an arm whose outputs follow its input is not flagged
    assert not [line for line in verdict_lines([run(1.0)], headline="reward") if "SFT + GRPO" in line]
