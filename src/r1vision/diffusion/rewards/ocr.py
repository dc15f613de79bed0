"""OCR reward: does the image show the text the prompt quotes?

The target is the text between the first pair of ``"`` in the prompt (Flow-GRPO's and VRL's OCR data).
Scoring (``mode="flow_grpo"``, the default, Flow-GRPO's ``OcrScorer``): spaces removed and lower-cased on
both sides; distance 0 when the target occurs inside everything read, else the Levenshtein distance
between the two, capped at the target's length; reward ``1 - distance / len(target)``. That credits
"arbitrary surrounding garbage" fully, so ``mode="strict"`` compares the whole text read with the target
(no substring credit). The text read is kept per sample (``last_reads``) for audits of reward hacking.

The engine is rapidocr (PP-OCR models shipped inside its wheel: offline, no download at run time,
ONNX on the CPU with one thread), or any callable ``image -> str`` (tests, other engines).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

_MAX_READ = 2000  # characters of OCR output compared (bounds the distance computation)


def target_text(prompt: str) -> str | None:
    """The text between the first pair of double quotes, or ``None``."""
    parts = str(prompt).split('"')
    return parts[1] if len(parts) >= 3 and parts[1].strip() else None


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insertions, deletions, substitutions), O(len(a) * len(b)) with two rows."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def _norm(text: str) -> str:
    return text.replace(" ", "").lower()


_MAX_TARGET = (
    500  # characters of a quoted target compared (Flow-GRPO's are 2-30; 50,000 cost 13.6 s an image)
)


def ocr_score(read: str, target: str, mode: str = "flow_grpo") -> float:
    """Reward in [0, 1] for an image whose OCR output is ``read``, given the quoted ``target``; the edit
    distance is bounded: at most ``_MAX_TARGET`` characters of the target and ``_MAX_READ`` of the text read."""
    tgt, got = _norm(target)[:_MAX_TARGET], _norm(read)[:_MAX_READ]
    if not tgt:
        return 0.0
    if mode == "flow_grpo" and tgt in got:
        return 1.0
    if mode not in ("flow_grpo", "strict"):
        raise ValueError(f"OCR mode {mode!r}; choose flow_grpo or strict")
    distance = min(levenshtein(got, tgt), len(tgt))
    return 1.0 - distance / len(tgt)


def edit_similarity(read: str, target: str) -> float:
    """``1 - distance / max(len)`` of the normalised texts (evaluation)."""
    a, b = _norm(read)[:_MAX_READ], _norm(target)[:_MAX_TARGET]
    return 1.0 - levenshtein(a, b) / max(len(a), len(b), 1)


class RapidOCREngine:
    """rapidocr with its bundled PP-OCR models, one ONNX thread, every line kept (Flow-GRPO keeps lines with
    score > 0). Built on first use; thread-safe."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()

    def __call__(self, image: Any) -> str:
        import numpy as np

        with self._lock:
            if self._engine is None:
                from rapidocr import RapidOCR

                self._engine = RapidOCR(
                    params={
                        "Global.use_cls": False,
                        "Global.text_score": 0.0,
                        "Global.log_level": "error",
                        "EngineConfig.onnxruntime.intra_op_num_threads": self.threads,
                        "EngineConfig.onnxruntime.inter_op_num_threads": 1,
                    }
                )
                # an image with no text is an expected read (score 0), not a warning on every sample
                logging.getLogger("RapidOCR").setLevel(logging.ERROR)
            result = self._engine(np.asarray(image.convert("RGB")))
        return "".join(result.txts or ()) if result is not None else ""


class OCRReward:
    """``f(prompts, images, **columns) -> list[float | None]``: OCR of each image against its prompt's quoted
    text (``None`` for a prompt without one: no signal rather than a wrong one)."""

    def __init__(self, engine: str | Callable[[Any], str] = "rapidocr", mode: str = "flow_grpo") -> None:
        self.engine = RapidOCREngine() if engine == "rapidocr" else engine
        if not callable(self.engine):
            raise ValueError(f"OCR engine {engine!r}: use 'rapidocr' or a callable image -> text")
        self.mode = mode
        self.last_reads: list[str] = []
        self.__name__ = "ocr"

    def read(self, image: Any) -> str:
        try:
            return str(self.engine(image) or "")
        except Exception:  # noqa: BLE001 - an unreadable image reads as nothing
            return ""

    def __call__(self, prompts: Sequence[str], images: Sequence[Any], **kwargs: Any) -> list[float | None]:
        reads = [self.read(image) for image in images]
        self.last_reads = reads
        out: list[float | None] = []
        for prompt, read in zip(prompts, reads, strict=True):
            target = target_text(prompt)
            out.append(None if target is None else ocr_score(read, target, self.mode))
        log_extra = kwargs.get("log_extra")
        if callable(log_extra):
            log_extra("ocr_read", reads)
        return out
