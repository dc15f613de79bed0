"""Prompt data for text-to-image GRPO.

Sources: Flow-GRPO / VRL prompt files (a folder with ``train.txt`` / ``test.txt``, one prompt per line; the
OCR target is the text between the first pair of ``"``), a single ``.txt`` file, or any dataset with a
``prompt`` column (Hub id, folder, jsonl, parquet: the loader every r1vision task uses). Under an OCR reward
a prompt without a quoted target is refused before step 1, naming its line. ``synth_t2i`` writes offline
prompt sets in the same file format.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r1vision.diffusion.rewards.ocr import target_text
from r1vision.tasks.loading import DatasetLoadError, DatasetValidationError, canonical_split, split_names


def _txt_file(source: Path, split: str) -> Path | None:
    if source.is_file() and source.suffix == ".txt":
        return source
    if source.is_dir():
        for name in split_names(split):
            if (source / f"{name}.txt").is_file():
                return source / f"{name}.txt"
    return None


def load_prompts(source: str | Path, split: str = "train", limit: int | None = None):
    """A ``datasets.Dataset`` with a ``prompt`` column (and ``line``, 1-based, for prompt files)."""
    import datasets

    path = Path(source).expanduser()
    txt = _txt_file(path, split)
    if txt is not None:
        raw = txt.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:  # name the line, not the byte offset
            line = raw[: exc.start].count(b"\n") + 1
            raise DatasetLoadError(
                f"{txt}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
        rows = [{"prompt": text, "line": n, "source": str(txt)} for n, text in lines if text]
        if not rows:
            raise DatasetLoadError(f"{txt}: split {split!r} is empty (no prompts)")
        dataset = datasets.Dataset.from_list(rows)
    else:
        from r1vision.tasks.loading import load_rows

        dataset = load_rows(str(source), split, required=("prompt",))
    if limit is not None:
        dataset = dataset.select(range(min(limit, len(dataset))))
    return dataset


def check_prompts(dataset: Any, reward_names: Sequence[str]) -> None:
    """Refuse, naming the line (or row), a prompt an OCR reward could not score: no quoted target."""
    if not any(name.startswith("ocr") for name in reward_names):
        return
    for i, row in enumerate(dataset):
        if target_text(row["prompt"]) is None:
            where = f"{row['source']}:{row['line']}" if row.get("line") else f"row {i}"
            raise DatasetValidationError(
                f"{where}: prompt {row['prompt'][:80]!r} has no text between double quotes for the OCR reward"
            )


WORDS = (
    "OPEN",
    "SALE",
    "Hello World",
    "Cafe 24",
    "EXIT",
    "Welcome",
    "Fresh Bread",
    "No Parking",
    "Spring 2024",
    "Forever Yours",
    "STOP",
    "Library",
    "Good Luck",
    "Best Coffee",
    "Night Market",
    "Sunrise",
)
SCENES = (
    "A neon sign that says",
    "A wooden board with the words",
    "A poster reading",
    "A storefront sign",
    "A chalkboard that reads",
    "A book cover titled",
    "A banner with the text",
)
SUBJECTS = (
    "a cat",
    "a city street",
    "a mountain",
    "a cup of coffee",
    "a garden",
    "the sea",
    "a forest",
    "a room",
)


def synth_t2i(out_dir: str | Path, n: int, seed: int = 0, split: str = "train", kind: str = "ocr") -> Path:
    """Write ``{split}.txt`` with ``n`` prompts: ``kind="ocr"`` quoted sign texts (Flow-GRPO's OCR format),
    ``"brightness"`` "a bright/dark photo of ..." (the demo's prompt-conditioned task)."""
    rng = random.Random(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(n):
        if kind == "ocr":
            lines.append(f'{rng.choice(SCENES)} "{rng.choice(WORDS)}"')
        elif kind == "brightness":
            lines.append(f"a {'bright' if i % 2 == 0 else 'dark'} photo of {rng.choice(SUBJECTS)}")
        else:
            raise ValueError(f"kind {kind!r}; choose ocr or brightness")
    path = out / f"{canonical_split(split)}.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
