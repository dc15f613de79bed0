"""The OCR reward: Flow-GRPO's scoring table, the strict mode, targets from quotes, and one real read of a
rendered image by rapidocr (its models ship in the wheel: no download)."""

from __future__ import annotations

import pytest

from r1vision.diffusion.rewards.ocr import OCRReward, edit_similarity, levenshtein, ocr_score, target_text


@pytest.mark.parametrize(
    ("read", "target", "flow_grpo", "strict"),
    [
        ("Hello World", "Hello World", 1.0, 1.0),
        ("helloworld", "Hello World", 1.0, 1.0),  # spaces and case do not count
        ("BIG SALE TODAY", "SALE", 1.0, 1 - 4 / 4),  # substring: full credit, strict: distance 8 capped at 4
        ("SALF", "SALE", 0.75, 0.75),
        ("", "OPEN", 0.0, 0.0),
        ("xxxxxxxxxxxxxxxxxxxx", "OPEN", 0.0, 0.0),  # distance capped at the target's length
        ("Cafe 2", "Cafe 24", 1 - 1 / 6, 1 - 1 / 6),
    ],
)
def test_scoring_table(read, target, flow_grpo, strict):
    assert ocr_score(read, target) == pytest.approx(flow_grpo)
    assert ocr_score(read, target, "strict") == pytest.approx(strict)


def test_targets_distance_and_similarity():
    assert target_text('A sign that says "OPEN" in red') == "OPEN"
    assert target_text('first "one" then "two"') == "one"
    assert target_text("no quotes here") is None and target_text('only "" empty') is None
    assert levenshtein("kitten", "sitting") == 3 and levenshtein("", "abc") == 3
    assert edit_similarity("Hello", "hello") == 1.0


def test_reward_records_reads_and_gives_none_without_a_target():
    reads = iter(["OPEN", "OPRN", "anything"])
    reward = OCRReward(engine=lambda image: next(reads))
    values = reward(['a sign "OPEN"', 'a sign "OPEN"', "no target"], [None, None, None])
    assert values == [1.0, 0.75, None] and reward.last_reads == ["OPEN", "OPRN", "anything"]
    broken = OCRReward(engine=lambda image: 1 / 0)  # an engine error reads as nothing, never raises
    assert broken(['x "AB"'], [None]) == [0.0]


@pytest.mark.slow
def test_rapidocr_reads_a_rendered_word_offline(monkeypatch):
    from PIL import Image, ImageDraw, ImageFont

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    image = Image.new("RGB", (320, 96), "white")
    try:
        font = ImageFont.load_default(size=40)
    except TypeError:  # Pillow < 10.1
        font = ImageFont.load_default()
    ImageDraw.Draw(image).text((12, 24), "Hello World", fill="black", font=font)
    reward = OCRReward()
    assert reward(['a poster "Hello World"'], [image]) == [1.0]
    assert reward.last_reads[0].replace(" ", "").lower() == "helloworld"
    blank = Image.new("RGB", (320, 96), "white")
    assert reward(['a poster "Hello World"'], [blank]) == [0.0]
