"""The HTTP client of one r1vision vLLM server (one per training process): health wait with a timeout,
generate, chunked weight push."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from typing import Any

import torch

from r1vision.generation.vllm_server import encode_clip, encode_image

DEFAULT_CHUNK_BYTES = 256 * 2**20  # weight-push request size; bounds the client's extra host memory


class VLLMServerClient:
    """HTTP client of one r1vision vLLM server (one per training process)."""

    def __init__(self, base_url: str, request_timeout: float | None = 3600.0) -> None:
        import requests

        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.request_timeout = request_timeout

    def _post(self, path: str, **kwargs: Any) -> Any:
        response = self.session.post(self.base_url + path, timeout=self.request_timeout, **kwargs)
        if not response.ok:
            raise RuntimeError(
                f"vLLM server {self.base_url}{path}: HTTP {response.status_code}: {response.text[:2000]}"
            )
        return response.json()

    def wait_healthy(self, timeout: float) -> dict[str, Any]:
        """Poll ``/health`` until it answers; ``ConnectionError`` naming the URL after ``timeout`` seconds."""
        import requests

        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            try:
                if self.session.get(self.base_url + "/health", timeout=5).ok:
                    return self.get_server_info()
            except requests.RequestException as exc:
                last = exc
            if time.monotonic() > deadline:
                raise ConnectionError(
                    f"no r1vision vLLM server answered at {self.base_url} within {timeout:.0f}s ({last}). "
                    "Start one server per training process with `r1vision vllm-serve --num-servers N "
                    "--base-port P` (P = vllm_server_port), or raise vllm_server_timeout."
                )
            time.sleep(1.0)

    def get_server_info(self) -> dict[str, Any]:
        """``/info``: model, budget, dtype, request counters (also what TRL's trainer reads at start-up)."""
        response = self.session.get(self.base_url + "/info", timeout=30)
        response.raise_for_status()
        return response.json()

    def generate(self, requests: list[dict[str, Any]], sampling: dict[str, Any]) -> list[dict[str, Any]]:
        """``requests``: ``{"prompt_token_ids", "images" (PIL), "videos" (clips), "n"}``; returns one result
        per request."""
        body = {
            "requests": [
                {
                    **r,
                    "images": [encode_image(i) for i in r.get("images") or []],
                    "videos": [encode_clip(c) for c in r.get("videos") or []],
                }
                for r in requests
            ],
            "sampling": sampling,
        }
        return self._post("/generate", data=json.dumps(body), headers=_JSON)["results"]

    def update_weights(
        self,
        names: Sequence[str],
        weights: Iterable[tuple[str, torch.Tensor]],
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> int:
        """Push ``(name, tensor)`` pairs in safetensors chunks; ``names`` pick the submodules to reload."""
        from safetensors.torch import save

        self._post("/weights/begin", data=json.dumps({"names": list(names)}), headers=_JSON)
        chunk: dict[str, torch.Tensor] = {}
        size = 0
        for name, tensor in weights:
            # A copy: under ZeRO-3 the gathered tensor is released when the next one is gathered.
            chunk[name] = tensor.detach().to("cpu", copy=True).contiguous()
            size += chunk[name].numel() * chunk[name].element_size()
            if size >= chunk_bytes:
                self._post("/weights/chunk", data=save(chunk))
                chunk, size = {}, 0
        if chunk:
            self._post("/weights/chunk", data=save(chunk))
        return int(self._post("/weights/end")["tensors"])

    def update_adapter(self, data: bytes, config: dict[str, Any]) -> int:
        """Send a LoRA adapter (safetensors bytes, PEFT config); the server generates with it from now on."""
        headers = {"X-Adapter-Config": json.dumps(config), "Content-Type": "application/octet-stream"}
        return int(self._post("/adapter", data=data, headers=headers)["version"])

    def reset_cache(self) -> None:
        self._post("/reset_cache")


_JSON = {"Content-Type": "application/json"}
