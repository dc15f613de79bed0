"""The vendored fixtures are the files their README says they are: every real Hub file by its git blob id."""

from __future__ import annotations

import gzip
import hashlib
import re

import pytest

from tests.helpers.realcfg import REALCFG, hub_folder

ROWS = re.findall(
    r"^\| `([\w./]+)`(?: \(gzipped here\))? \| `([0-9a-f]{40})` \|$",
    (REALCFG / "README.md").read_text(),
    re.M,
)


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_the_readme_lists_every_file() -> None:
    listed = {name for name, _ in ROWS}
    on_disk = {str(p.relative_to(REALCFG)).removesuffix(".gz") for p in REALCFG.rglob("*") if p.is_file()}
    assert listed == on_disk - {"README.md"}
    assert len(listed) == 18


@pytest.mark.parametrize(("name", "blob"), ROWS, ids=[n for n, _ in ROWS])
def test_each_file_has_its_hub_blob_id(name: str, blob: str) -> None:
    path = REALCFG / name
    data = gzip.decompress((REALCFG / f"{name}.gz").read_bytes()) if not path.exists() else path.read_bytes()
    assert _blob_id(data) == blob


def test_hub_folder_is_a_checkpoint_without_weights(tmp_path) -> None:
    from transformers import AutoProcessor

    folder = hub_folder("qwen2_5_vl", tmp_path / "m")
    processor = AutoProcessor.from_pretrained(folder)
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == 151655
    assert len(processor.tokenizer) == 151665
    with pytest.raises(FileNotFoundError, match="missing"):
        hub_folder("qwen9_vl", tmp_path / "x")
