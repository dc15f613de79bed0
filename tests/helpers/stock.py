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
found = {}
for folder in sys.argv[1:]:
    d = Path(folder)
    model = AutoModelForImageTextToText.from_pretrained(d)
    tok, ip = AutoTokenizer.from_pretrained(d), AutoImageProcessor.from_pretrained(d)
    names = [json.loads((d / f).read_text()).get("processor_class")
             for f in ("processor_config.json", "tokenizer_config.json") if (d / f).exists()]
    found[folder] = {"model": type(model).__name__, "tokenizer": type(tok).__name__, "names": names}
    del model
assert "r1vision" not in sys.modules
print(json.dumps(found))
"""


def stock_load_many(folders: list[str | Path]) -> dict[str, dict]:
    """Load every folder in one fresh interpreter that never imports r1vision (one start-up of torch and
    transformers for all of them); ``{str(folder): what it found}``."""
    if not folders:
        return {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", STOCK_LOAD, *map(str, folders)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300 + 60 * len(folders),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stock_load(folder: str | Path) -> dict:
    """Load ``folder`` in a fresh interpreter that never imports r1vision; what it found."""
    return stock_load_many([folder])[str(folder)]
