"""Load a saved folder the way a user without r1vision does: stock transformers in a fresh interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

STOCK_LOAD = r"""
import json, sys
from pathlib import Path
from transformers import AutoImageProcessor, AutoModelForImageTextToText, AutoTokenizer
d = Path(sys.argv[1])
model = AutoModelForImageTextToText.from_pretrained(d)
tok, ip = AutoTokenizer.from_pretrained(d), AutoImageProcessor.from_pretrained(d)
names = [json.loads((d / f).read_text()).get("processor_class")
         for f in ("processor_config.json", "tokenizer_config.json") if (d / f).exists()]
assert "r1vision" not in sys.modules
print(json.dumps({"model": type(model).__name__, "tokenizer": type(tok).__name__, "names": names}))
"""


def stock_load(folder: str | Path) -> dict:
    """Load ``folder`` in a fresh interpreter that never imports r1vision; what it found."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", STOCK_LOAD, str(folder)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])
