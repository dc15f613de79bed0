"""The prompt of the ``color`` task."""

PROMPT = "{question} Answer with one word inside <answer></answer>."


def answer_text(answer: str) -> str:
    """The target answer as the prompt asks for it."""
    return f"<answer>{answer}</answer>"
