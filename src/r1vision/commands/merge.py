"""Merge a LoRA run's adapter into its base model (a stand-alone folder stock transformers loads)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from r1vision.commands._args import add, parser

GROUP = "data and models"


def build_parser() -> argparse.ArgumentParser:
    p = parser("merge", __doc__)
    p.add_argument("adapter", help="an adapter folder (a LoRA run's output_dir)")
    add(p, "--output_dir", required=True, help="where to write the merged model")
    add(p, "--base", default=None, help="base model (default: the one recorded in adapter_config.json)")
    return p


def run(argv: Sequence[str]) -> int:
    a = build_parser().parse_args(list(argv))
    from pathlib import Path

    from r1vision.commands._args import UsageError

    if not (Path(a.adapter).expanduser() / "adapter_config.json").is_file():
        what = (
            "no such folder" if not Path(a.adapter).expanduser().exists() else "no adapter_config.json there"
        )
        raise UsageError(f"{a.adapter}: not a LoRA adapter folder ({what})")
    from r1vision.trainer.merge import merge_adapter

    print(f"merged model in {merge_adapter(a.adapter, a.output_dir, a.base)}")
    return 0
