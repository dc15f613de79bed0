"""``completion_text``: any TRL completion shape, nested past the recursion limit or cyclic, never raises."""

from __future__ import annotations

from r1vision.tasks.color.rewards import color_accuracy, color_format
from r1vision.tasks.common import completion_text
from r1vision.tasks.geometry.rewards import make_rewards


def _deep(depth: int) -> list:
    """A conversational completion nested ``depth`` levels deep, past Python's recursion limit."""
    node: object = {"role": "assistant", "content": "<answer>red</answer>"}
    for i in range(depth):
        node = [node] if i % 2 else {"content": node}
    return node  # type: ignore[return-value]


def test_deeply_nested_and_cyclic_completions_do_not_raise() -> None:
    deep = _deep(50_000)
    assert completion_text(deep) == "<answer>red</answer>"
    cyclic: list = ["a"]
    cyclic.append(cyclic)
    assert completion_text(cyclic) == "a"
    assert color_accuracy(None, [deep], answer=["red"]) == [1.0]
    assert color_format(None, [deep]) == [1.0]
    for spec in make_rewards(eos_token_id=2):
        values = spec.func([None], [deep], solution=["\\boxed{3}"])
        assert len(values) == 1 and spec.low <= values[0] <= spec.high
