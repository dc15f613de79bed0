"""Checks that run before training, so bad rows fail in seconds instead of hours into a run."""

from __future__ import annotations

from typing import Any

from r1vision.tasks.loading import DatasetValidationError
from r1vision.vision.images import ImageLoadError, count_parts, describe_source, images_of_row, load_image

# Literal vision tokens in a prompt's text desynchronise placeholders and features (TRL #6401/#6294).
_RAW_VISION_MARKERS = ("<|image_pad|>", "<|vision_start|>", "<|vision_end|>", "<|video_pad|>")


# Qwen-VL's smart_resize refuses longer/shorter side ratios above this.
MAX_ASPECT_RATIO = 200


def row_label(row: dict[str, Any], index: int | None) -> str:
    """How a row is named in error messages: its index plus an id column when it has one."""
    parts = [f"row {index}"] if index is not None else ["row ?"]
    for key in ("id", "image_id", "problem_id", "row_id"):
        if key in row and row[key] is not None:
            parts.append(f"{key}={row[key]!r}")
            break
    return " ".join(parts)


def count_image_parts(prompt: Any, kind: str = "image") -> int:
    """Number of ``{"type": kind}`` parts (``"image"`` or ``"video"``) in a conversational prompt (0 for
    plain text)."""
    return count_parts(prompt, kind)


def prompt_texts(prompt: Any) -> list[str]:
    """All text of a prompt, conversational or plain."""
    if isinstance(prompt, str):
        return [prompt]
    texts: list[str] = []
    for message in prompt or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(
                p.get("text") or "" for p in content if isinstance(p, dict) and p.get("type") == "text"
            )
    return texts


def validate_row(row: dict[str, Any], index: int | None, image_root: str | None = None) -> None:
    """Raise :class:`DatasetValidationError` if ``row`` cannot be trained on."""
    label = row_label(row, index)
    if "prompt" not in row:
        raise DatasetValidationError(f"{label}: no 'prompt' column (columns: {sorted(row)})")
    prompt = row["prompt"]
    images = images_of_row(row)
    column = "images" if row.get("images") is not None else "image"
    for text in prompt_texts(prompt):
        for marker in _RAW_VISION_MARKERS:
            if marker in text:
                raise DatasetValidationError(
                    f"{label}: prompt text contains the literal token {marker}; use a {{'type': 'image'}} "
                    "content part instead, the processor inserts and expands vision tokens itself"
                )
    n_parts = count_image_parts(prompt)
    if n_parts and len(images) != n_parts:
        raise DatasetValidationError(
            f"{label}: prompt has {n_parts} image part(s) but the row has {len(images)} image(s) in '{column}'"
        )
    if images and not isinstance(prompt, list):
        raise DatasetValidationError(
            f"{label}: rows with images need a conversational prompt (a list of messages), got {type(prompt).__name__}"
        )
    _validate_videos(row, label, image_root, has_images=bool(images))
    for j, value in enumerate(images):
        if value is None:
            raise DatasetValidationError(f"{label}: {column}[{j}] is empty")
        try:
            width, height = load_image(value, image_root).size
        except ImageLoadError as exc:
            raise DatasetValidationError(f"{label}: {column}[{j}] ({describe_source(value)}): {exc}") from exc
        if max(width, height) > MAX_ASPECT_RATIO * min(width, height):
            raise DatasetValidationError(
                f"{label}: {column}[{j}] ({describe_source(value)}) is {width}x{height}, an aspect ratio above "
                f"{MAX_ASPECT_RATIO}, the limit of Qwen-VL's resize rule (smart_resize); crop or pad it"
            )


def _validate_videos(row: dict[str, Any], label: str, root: str | None, has_images: bool) -> None:
    """Video rows: one kind of vision input per row, and every local video file or frame folder present
    (decoding waits for the step that uses it: a long video is not read twice)."""
    from r1vision.vision.images import resolve_path
    from r1vision.vision.video import describe_video, videos_of_row

    videos = videos_of_row(row)
    if not videos:
        return
    if has_images:
        raise DatasetValidationError(f"{label}: the row has both images and videos; use one kind per row")
    for j, value in enumerate(videos):
        if isinstance(value, str) and not value.startswith(("http://", "https://")):
            if not resolve_path(value, root).exists():
                raise DatasetValidationError(f"{label}: video {j} ({describe_video(value)}): file not found")


def first_row(dataset: Any) -> dict[str, Any] | None:
    """The first row of a map-style dataset, or ``None`` (no dataset, a dict of splits, a stream, empty)."""
    if dataset is None or isinstance(dataset, dict) or not hasattr(dataset, "__getitem__"):
        return None
    try:
        return dataset[0]
    except (IndexError, KeyError, TypeError):
        return None


def validate_dataset(dataset: Any, image_root: str | None = None, limit: int | None = None) -> int:
    """Validate the first ``limit`` rows (all when ``None``; none when 0); return how many were checked."""
    if dataset is None:
        return 0
    if hasattr(dataset, "__len__") and len(dataset) == 0:
        raise DatasetValidationError("the dataset has no rows (check --dataset and its split)")
    if limit == 0:
        return 0
    if hasattr(dataset, "__len__") and hasattr(dataset, "select"):
        n = len(dataset) if limit is None else min(limit, len(dataset))
        rows = dataset.select(range(n))
    elif hasattr(dataset, "take"):  # IterableDataset
        rows = dataset.take(limit) if limit is not None else dataset
    else:
        rows = dataset if limit is None else list(dataset)[:limit]
    checked = 0
    for i, row in enumerate(rows):
        validate_row(row, i, image_root)
        checked += 1
    return checked


def check_sequence_lengths(
    dataset: Any,
    processor: Any,
    budget: Any,
    max_length: int | None,
    image_root: str | None = None,
    limit: int | None = None,
    video_budget: Any = None,
) -> int:
    """SFT: every row's prompt with its image and video tokens must fit ``max_length``; return the longest
    full row.

    TRL truncates SFT sequences to ``max_length`` from the end. Cutting the target is a choice the user
    makes; cutting image tokens fails in step 1 (``max_length (1024) is too short``). Here the row, its
    image or video size and the length its prompt needs are named before training. Video token counts come
    from each file's header (:func:`r1vision.vision.video.video_tokens`), not from decoding it.
    """
    from r1vision.vision.video import video_tokens, videos_of_row

    if dataset is None or not hasattr(dataset, "__len__"):
        return 0
    n = len(dataset) if limit is None else min(limit, len(dataset))
    image_token = getattr(processor, "image_token", "<|image_pad|>")
    video_token = getattr(processor, "video_token", "<|video_pad|>")

    def length(messages: list, n_vision: int, **kwargs: Any) -> int:
        text = processor.apply_chat_template(messages, tokenize=False, **kwargs)
        ids = processor.tokenizer(text, add_special_tokens=False)["input_ids"]
        return len(ids) - text.count(image_token) - text.count(video_token) + n_vision

    longest = 0
    for i in range(n):
        row = dataset[i]
        prompt = list(row.get("prompt") or [])
        if not prompt or not isinstance(prompt[0], dict):
            continue
        sizes = [load_image(v, image_root).size for v in images_of_row(row)]
        n_vision = sum(budget.num_tokens(w, h) for w, h in sizes)
        kind, setting = "image", f"max_pixels={budget.max_pixels}"
        videos = videos_of_row(row) if video_budget is not None else []
        if videos:
            counted = [video_tokens(v, video_budget, image_root) for v in videos]
            n_vision += sum(tokens for tokens, _ in counted)
            sizes += [size for _, size in counted]
            kind = "video"
            setting = f"video_max_frames={video_budget.max_frames}, video_max_frame_pixels={video_budget.max_frame_pixels}"
        longest = max(longest, length(prompt + list(row.get("completion") or []), n_vision))
        if max_length is None:
            continue
        needed = length(prompt, n_vision, add_generation_prompt=True)
        if needed > max_length:
            shown = ", ".join(f"{w}x{h}" for w, h in sizes) or "none"
            lower = "--max_pixels" if kind == "image" else "--video_max_frames or --video_max_frame_pixels"
            raise DatasetValidationError(
                f"{row_label(row, i)}: its prompt needs {needed} tokens ({n_vision} {kind} tokens for {kind}(s) "
                f"{shown} at {setting}, {needed - n_vision} text tokens) but max_length is "
                f"{max_length}, so truncation would cut {kind} tokens; pass --max_length {needed} or more "
                f"(or leave it unset: no truncation), or lower {lower}"
            )
    return longest


def check_generation_batch(n_rows: int, args: Any) -> None:
    """GRPO draws ``generation_batch_size / num_generations`` distinct prompts per generation round; with
    fewer training rows TRL's sampler yields no batch and the run "finishes" after 0 steps, exit code 0."""
    batch = getattr(args, "generation_batch_size", None)
    groups = max(1, int(getattr(args, "num_generations", 1) or 1))
    if not batch:
        return
    prompts = int(batch) // groups
    if n_rows < prompts:
        raise DatasetValidationError(
            f"the training split has {n_rows} row(s), fewer than the {prompts} distinct prompts one GRPO "
            f"generation round draws (generation_batch_size {batch} = per_device_train_batch_size "
            f"{args.per_device_train_batch_size} x processes x steps_per_generation {args.steps_per_generation}, "
            f"over num_generations {groups}); TRL would train 0 steps. Use at least {prompts} rows, or lower "
            "per_device_train_batch_size / steps_per_generation."
        )
