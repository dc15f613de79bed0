"""Pieces of the demo that are cheap to check exactly: compact prompt/tokenizer, reports (FLOP match: test_demo_flops)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.tasks import task_rows


def test_compact_prompt_rows(tmp_path):
    from r1vision.tasks.sgg.prompts import compact_prompt
    from r1vision.tasks.sgg.synth import synth_sgg
    from r1vision.tasks.sgg.task import SGGTask

    synth_sgg(tmp_path, 2, seed=0, split="train", preset="demo")
    rows = task_rows("sgg", tmp_path, "train", family="qwen2_vl", prompt="compact")
    text = rows[0]["prompt"][0]["content"][1]["text"]
    assert text == compact_prompt("qwen2_vl") and "0-1000" in text and len(text) < 200
    with pytest.raises(ValueError, match="option .prompt. expects one of .open., .closed., .compact."):
        SGGTask.parse_options({"prompt": "chatty"})


def test_compact_tokenizer_round_trips_and_is_shorter(tmp_path):
    from transformers import AutoProcessor

    from r1vision.testing.tiny import make_tiny_model

    target = '<answer>{"objects": [{"id": "red circle.1", "bbox": [0, 333, 333, 667]}], "relationships": []}</answer>'
    lengths = {}
    for compact in (False, True):
        path = make_tiny_model(
            "qwen2_vl", tmp_path / str(compact), hidden=32, heads=2, vision_width=16, vision_depth=1,
            corpus=[target] * 20, compact_tokenizer=compact,
        )  # fmt: skip
        tok = AutoProcessor.from_pretrained(str(path)).tokenizer
        ids = tok(target)["input_ids"]
        assert tok.decode(ids) == target
        assert (
            tok.convert_tokens_to_ids("<|image_pad|>")
            == json.loads((path / "config.json").read_text())["image_token_id"]
        )
        lengths[compact] = len(ids)
    assert lengths[True] * 2 < lengths[False]
    # Colour and shape stay separate tokens, so a pair the corpus never had ("red square") is made of
    # the same trained pieces as the pairs it had ("red circle", "blue square").
    path = make_tiny_model(
        "qwen2_vl", tmp_path / "pairs", hidden=32, heads=2, vision_width=16, vision_depth=1,
        corpus=[target] * 20 + [target.replace("red circle", "blue square")] * 20, compact_tokenizer=True,
    )  # fmt: skip
    tok = AutoProcessor.from_pretrained(str(path)).tokenizer
    pieces = [tok.decode([i]) for i in tok(target.replace("red circle", "red square"))["input_ids"]]
    assert " square." in pieces and pieces[pieces.index(" square.") - 1].endswith('"red')
    assert len(pieces) == len(tok(target)["input_ids"])


def test_compositional_split_keeps_held_out_pairs_out_and_in(tmp_path):
    import pyarrow.parquet as pq

    from r1vision.tasks.sgg.synth import make_config, synth_sgg

    held = ("red triangle", "green circle", "blue square")
    synth_sgg(
        tmp_path, 60, seed=1, split="train", preset="demo", min_objects=1, max_objects=2, exclude_names=held
    )
    synth_sgg(
        tmp_path, 60, seed=1, split="ood", preset="demo", min_objects=1, max_objects=2, require_names=held
    )

    def names(split):
        rows = pq.read_table(tmp_path / f"{split}.parquet", columns=["objects"]).to_pylist()
        return [{o["id"].rsplit(".", 1)[0] for o in json.loads(r["objects"])} for r in rows]

    train, ood = names("train"), names("ood")
    assert not set().union(*train) & set(held)
    assert len(set().union(*train)) == 6  # the six other pairs all appear
    assert all(scene & set(held) for scene in ood)
    assert set().union(*ood) - set(held)  # other pairs still appear beside the held-out one
    # exclude_rate < 1: held-out pairs become rare instead of absent (the demo's long-tail split).
    synth_sgg(tmp_path, 300, seed=1, split="rare", preset="demo", max_objects=2, exclude_names=held,
              exclude_rate=0.9)  # fmt: skip
    rare = [n for scene in names("rare") for n in scene]
    share = sum(n in held for n in rare) / len(rare)
    assert 0.0 < share < 0.1  # natural share 1/3; 0.1 x that is ~0.033
    with pytest.raises(ValueError, match="exclude_names"):
        make_config("demo", exclude_names=["pink circle"])
    with pytest.raises(ValueError, match="both excluded and required"):
        make_config("demo", exclude_names=["red triangle"], require_names=["red triangle"])
