"""The instruction of the ``svg`` task, shared by the real-data loader and the synthetic generator."""

PROMPT = "Convert this figure into SVG code that reproduces it. Output only the SVG."
