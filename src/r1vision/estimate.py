"""``r1vision estimate-memory``: per-GPU memory of a GRPO run before you book the GPUs.

Parameter counts are exact: the model is built from its config on the ``meta`` device (no weights, no
download) and its tensors counted. The config comes from a local folder, a ``config.json`` path, one of
the built-in shapes under ``r1vision/data/model_shapes`` (Qwen2-VL-2B/7B, Qwen2.5-VL-3B/7B,
Qwen3-VL-4B/8B, Qwen3-VL-30B-A3B, Qwen3.5-0.8B, Qwen3.6-35B-A3B (Qwen3.5-MoE architecture); works offline)
or, last, the Hub.

Mixture-of-experts models store, train and shard every expert (their memory follows the total count);
activations follow the k experts a token runs through, and the report gives total and active counts.
Under ZeRO-3 a layer's fused experts are one module, gathered whole. Qwen3.5's hybrid stack caches
keys and values in its full-attention layers only; its gated-delta-net layers keep a fixed state per
sequence instead.

The memory model follows DeepSpeed's own estimator for model states
(``estimate_zero2/3_model_states_mem_needs``; a test keeps the two within 5 %), per trainable parameter
for the optimizer side and per stored parameter for the weights:

- ZeRO-2: bf16 weights 2 B/param on every GPU; bf16 + fp32 gradients (6 B) and AdamW's fp32 master,
  momentum and variance (12 B) per trainable param, sharded over the GPUs (DeepSpeed: 2 + 18/N).
- ZeRO-3: weights sharded too; fp32 gradient partition (4 B) and the 12 B of AdamW sharded; plus
  4 B x the largest single module (gathered for compute, e.g. the embedding) (DeepSpeed: 4 L + 18/N).
- no DeepSpeed (``--zero 0``: one GPU or DDP): torch's AdamW on the parameters as loaded, so a full
  fine-tune keeps weights, gradients and both moments in the load dtype (bf16: 2 + 2 + 4 B/param, no
  fp32 master, as in stock TRL; measured on an H200: 16.7 GiB for 2.2B params, where the ZeRO-2
  accounting said 46) and peft's LoRA adapters, kept in fp32, 4 + 4 + 8 B; DDP over several GPUs adds
  its gradient buckets (one more copy of the gradients).
- FSDP2 (``--fsdp2``: torch's ``fully_shard``, one unit per block): under bf16 mixed precision (TRL's
  ``bf16``, on by default on a bf16 GPU) accelerate upcasts the trainable parameters to fp32 masters
  before sharding and computes in bf16, so each trainable parameter costs 4 B of weight, 4 B of gradient
  and 8 B of AdamW moments, all sharded (16/N against ZeRO-3's 18/N); frozen ones keep the load dtype.
  Without it (``--no_bf16``, ``--bf16 false``) the ``--zero 0`` states (torch's AdamW in the load dtype)
  are sharded. The reference model is sharded too; gathered for compute (in bf16 under mixed precision):
  the root unit (embedding, LM head, norms) for the whole step plus two blocks (the one computing and the
  one prefetched). HF generation gathers block by block, not the whole model as ZeRO-3 does.
- ``--offload`` (``zero*_offload.json``): ZeRO-2 keeps only the bf16 weights on the GPU, ZeRO-3 only the
  gathered working set; the rest goes to CPU RAM.
- LoRA / a frozen vision tower: frozen parameters cost their bf16 weights only.
- GRPO's reference model (``beta`` > 0 without LoRA): another bf16 copy of the weights (sharded under
  ZeRO-3). Under LoRA the reference is the base model with adapters off.
- activations for ``batch`` sequences of prompt + image + completion tokens (the training forward of
  one micro-batch), with or without gradient checkpointing;
- logits as TRL 1.16 computes them (fused LM head, ``trl.kernels.chunked_logprob``): fp32 tiles of
  4096 tokens x 32768 vocabulary entries (forward and backward), and, when the LM head trains, its
  fp32 gradient accumulator (vocab x hidden x 4 B).
- vLLM: colocated, it takes ``gpu_memory_utilization`` of every training GPU and must hold the full bf16
  weights plus a KV cache of ``max_model_len`` tokens per sequence; as servers (the 24 GB layout) it
  needs GPUs of its own.

A fixed 2 GiB covers the CUDA context and fragmentation; activations are an estimate (±20 %).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from r1vision.model_shapes import ModelShape, builtin_shapes, load_model_config, shape_of

GIB = 1024**3
OVERHEAD_BYTES = 2 * GIB
CARDS_GB = (24, 80)


@dataclass(frozen=True)
class TrainSetup:
    """The run being planned (per-device batch in sequences; lengths in tokens)."""

    gpus: int
    zero: int = 3
    offload: bool = False
    lora_r: int = 0
    freeze_vision: bool = False
    batch: int = 4
    prompt_tokens: int = 256
    completion_tokens: int = 1024
    max_pixels: int = 602112  # 768 image tokens for Qwen2/2.5-VL
    images: int = 1
    gradient_checkpointing: bool = True
    vllm_gpu_memory_utilization: float = 0.3
    vllm_kv_tokens: int = 0  # 0: room for `batch` sequences
    beta: float = 0.0  # GRPO's KL coefficient: > 0 loads a reference model (unless LoRA)
    fused_logits: bool = True  # GRPO (TRL's fused LM head); SFT materialises the logits
    # Bytes per weight as loaded: 2 for bf16 (r1vision's default on a GPU), 4 for fp32 (`--dtype float32`,
    # and TRL's own default). ZeRO-3 stores bf16 partitions whatever the load dtype (zero.Init).
    weight_bytes: int = 2
    generation: str = "hf"  # "hf", "vllm_colocate" or "vllm_server": which transients a step has
    num_generations: int = 8  # sequences generated per prompt (the HF generation's KV cache)
    lora_adapters: bool = False  # vllm_lora_adapters: a sync sends the adapter, not merged weights
    fsdp: bool = False  # FSDP2 full shard (zero must be 0: FSDP replaces DeepSpeed)
    # TRL's bf16 mixed precision (on by default on a bf16 GPU; r1vision turns it off on a CPU). It changes
    # FSDP2's states only: accelerate then keeps fp32 masters of the trainable parameters.
    bf16_autocast: bool = True


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per training GPU, by category, plus what vLLM needs and what goes to CPU RAM."""

    weights: int
    gradients: int
    optimizer: int
    gathered: int
    reference: int
    activations: int
    logits: int
    overhead: int
    vllm_min: int  # full bf16 weights + KV cache: the least a vLLM engine (TP=1) needs
    cpu_offload: int  # CPU RAM per node for offloaded states
    trainable_params: int
    # Transients outside the training step, on top of the model states (activations are free by then):
    sync_peak: int = 0  # a vLLM weight sync: one gathered layer and its merged copy (streamed sync)
    generation_peak: int = 0  # HF generation: under ZeRO-3 the whole model gathered, plus the KV cache

    @property
    def model_states(self) -> int:
        """Weights, gradients, optimizer and the ZeRO-3 working set: what DeepSpeed's estimator counts."""
        return self.weights + self.gradients + self.optimizer + self.gathered

    @property
    def training(self) -> int:
        """Everything the training process itself holds on one GPU."""
        return (
            self.weights
            + self.gradients
            + self.optimizer
            + self.gathered
            + self.reference
            + self.activations
            + self.logits
            + self.overhead
        )

    @property
    def peak(self) -> int:
        """The most the training process holds at once: the training step, or the model states plus the
        larger of the weight-sync and generation transients; fits are judged on it."""
        transient = (
            self.model_states + self.reference + self.overhead + max(self.sync_peak, self.generation_peak)
        )
        return max(self.training, transient)

    def fits_colocate(self, card_gb: float, gpu_memory_utilization: float) -> bool:
        """One vLLM engine inside each training process, sharing its GPU."""
        card = card_gb * GIB
        share = gpu_memory_utilization * card
        return share >= self.vllm_min and self.peak + share <= card

    def fits_server(self, card_gb: float) -> bool:
        """Training GPUs hold only training; vLLM servers run on GPUs of their own (TP=1)."""
        card = card_gb * GIB
        return self.peak <= card and self.vllm_min <= 0.9 * card


# ------------------------------------------------------------------------------------------ memory
def lm_activation_bytes_per_token(shape: ModelShape) -> int:
    """bf16 tensors one decoder layer keeps for backward, per token (SDPA: no attention matrix).

    Norm/attention inputs, q, attention output, o_proj input, residual, MLP input (7h), k and v
    (2 kv_dim), gate, up, act(gate) and act*up (4 I).
    """
    return 2 * (7 * shape.hidden + 2 * shape.kv_dim + 4 * shape.intermediate)


def vision_activation_bytes_per_patch(shape: ModelShape) -> int:
    """The same for one vision block, per patch (full multi-head attention: q, k, v all of width h)."""
    return 2 * (9 * shape.vision_hidden + 4 * shape.vision_intermediate)


def image_tokens(shape: ModelShape, max_pixels: int) -> int:
    """LM tokens of one image at the pixel budget (one token per (patch * merge)² pixels)."""
    return max_pixels // (shape.patch_size * shape.merge_size) ** 2


TOKEN_TILE, VOCAB_TILE = 4096, 32768  # trl.kernels.chunked_logprob's tile of the logits


def logits_bytes(shape: ModelShape, completion_tokens: int, lm_head_trains: bool) -> int:
    """TRL 1.16's fused LM head: fp32 logit tiles (forward, and recomputed for the gradient), the fp32
    hidden-state gradient of the scored tokens, and the LM head's fp32 weight-gradient accumulator when
    it trains (full fine-tuning)."""
    tile = min(completion_tokens, TOKEN_TILE) * min(shape.vocab, VOCAB_TILE) * 4
    hidden_grad = completion_tokens * shape.hidden * 4
    head = shape.lm_head_params or shape.vocab * shape.hidden  # tied: the embedding is the head
    return 2 * tile + hidden_grad + (4 * head if lm_head_trains else 0)


def estimate(shape: ModelShape, setup: TrainSetup) -> MemoryEstimate:
    """Per-GPU memory for ``setup`` on a model of ``shape``."""
    if setup.zero not in (0, 2, 3):
        raise ValueError(f"zero must be 0 (no DeepSpeed), 2 or 3, got {setup.zero}")
    if setup.gpus < 1:
        raise ValueError(f"gpus must be >= 1, got {setup.gpus}")
    if setup.offload and setup.zero == 0:
        raise ValueError("offload needs DeepSpeed (zero 2 or 3)")
    if setup.fsdp and setup.zero:
        raise ValueError("fsdp replaces DeepSpeed: zero must be 0 with fsdp")
    n, p = setup.gpus, shape.total_params
    if setup.lora_r > 0:
        trainable = setup.lora_r * shape.lora_in_out
        stored = p + trainable  # frozen base + adapters
    else:
        trainable = p - (shape.vision_params if setup.freeze_vision else 0)
        stored = p
    zero3 = setup.zero == 3
    # DeepSpeed's accounting (estimate_zero{2,3}_model_states_mem_needs): ZeRO-2 keeps bf16 and fp32
    # gradient partitions (6 B), ZeRO-3 the fp32 partition (4 B); AdamW 12 B; all sharded over the GPUs.
    weights = 2 * stored // n if zero3 else setup.weight_bytes * stored
    gradients = (4 if zero3 else 6) * trainable // n
    optimizer = 12 * trainable // n
    gathered = 4 * (shape.largest_layer_params or shape.largest_block_params) if zero3 else 0
    # GRPO's reference model for the KL term: a second bf16 copy unless LoRA (adapters off = reference)
    reference = 0
    if setup.beta > 0 and setup.lora_r == 0:
        reference = 2 * p // n if zero3 else 2 * p
    if setup.zero == 0:
        # torch's AdamW keeps its moments in each parameter's dtype: the load dtype for a full fine-tune,
        # fp32 for peft's adapters (autocast_adapter_dtype); nothing is sharded
        state = 4 if setup.lora_r > 0 else setup.weight_bytes
        weights = setup.weight_bytes * p + state * (stored - p)
        gradients = state * trainable * (2 if n > 1 else 1)  # DDP's buckets: a second copy
        optimizer = 2 * state * trainable
        reference = setup.weight_bytes * p if reference else 0
        if setup.fsdp:  # sharded (even on one GPU the units gather); gradients reduce-scattered, no DDP copy
            # under bf16 mixed precision accelerate's fsdp2_prepare_model upcasts the trainable parameters
            # to fp32 masters (their moments follow) and FSDP2 gathers bf16 copies for compute
            master = 4 if setup.bf16_autocast else state
            weights = (master * trainable + setup.weight_bytes * (stored - trainable)) // n
            gradients = master * trainable // n
            optimizer = 2 * master * trainable // n
            reference = reference // n
            root = shape.vocab * shape.hidden + shape.lm_head_params
            compute = 2 if setup.bf16_autocast else setup.weight_bytes
            gathered = compute * (root + 2 * shape.largest_block_params)
    cpu = 0
    if setup.offload:
        cpu += (16 if zero3 else 18) * trainable
        gradients = optimizer = 0
        if zero3:
            cpu += 2 * (stored + (p if reference else 0))
            weights = reference = 0

    img_tokens = image_tokens(shape, setup.max_pixels) * setup.images
    seq = setup.prompt_tokens + img_tokens + setup.completion_tokens
    tokens = setup.batch * seq
    per_layer = lm_activation_bytes_per_token(shape) * tokens
    if setup.gradient_checkpointing:  # layer inputs kept, one layer recomputed at a time
        lm_act = 2 * shape.hidden * tokens * shape.layers + per_layer
    else:
        lm_act = per_layer * shape.layers
    patches = setup.batch * setup.images * setup.max_pixels // shape.patch_size**2
    v_layer = vision_activation_bytes_per_patch(shape) * patches
    vision_frozen = setup.freeze_vision or setup.lora_r > 0
    if vision_frozen:  # no backward through the tower: only the forward's live layer
        v_act = v_layer
    elif setup.gradient_checkpointing:
        v_act = 2 * shape.vision_hidden * patches * shape.vision_layers + v_layer
    else:
        v_act = v_layer * shape.vision_layers
    if setup.fused_logits:
        logits = logits_bytes(shape, setup.batch * setup.completion_tokens, lm_head_trains=setup.lora_r == 0)
    else:  # bf16 logits of every position, their fp32 upcast in the loss and its gradient
        logits = setup.batch * seq * shape.vocab * (2 + 4 + 4)

    kv_tokens = setup.vllm_kv_tokens or setup.batch * seq
    kv = shape.kv_bytes(kv_tokens, max(1, kv_tokens // seq))  # K and V, bf16
    layer = shape.largest_layer_params or shape.largest_block_params
    sync_peak = generation_peak = 0
    if setup.generation.startswith("vllm"):
        # streamed sync (generation/weight_sync.py): one layer gathered (ZeRO-3) and its merged or copied
        # tensor, in the load dtype; the per-rank server path also copies it to the CPU. Under FSDP2 TRL's
        # walk gathers each parameter as the rank holds it: a trainable one is an fp32 master under bf16
        # mixed precision, and vLLM's load casts it to the engine's dtype
        load = max(setup.weight_bytes, 2)
        held = 4 if setup.fsdp and setup.lora_r == 0 and setup.bf16_autocast else load
        sync_peak = (held + load) * layer
        if setup.lora_adapters and setup.lora_r > 0:  # the whole adapter gathered once, fp32 (lora_push.py)
            sync_peak = 4 * trainable
    else:
        # HF generation of batch sequences: the KV cache grows to prompt + completion per sequence; under
        # ZeRO-3 TRL gathers the whole model (bf16) for it
        gen_kv = shape.kv_bytes(setup.batch * seq, setup.batch)
        generation_peak = gen_kv + (2 * p - 2 * stored // n if zero3 else 0)  # FSDP2: per block, in gathered
    return MemoryEstimate(
        weights=weights,
        gradients=gradients,
        optimizer=optimizer,
        gathered=gathered,
        reference=reference,
        activations=lm_act + v_act,
        logits=logits,
        overhead=OVERHEAD_BYTES,
        # with vLLM's LoRA support the engine also holds a bf16 slot of the adapter
        vllm_min=2 * p + kv + (2 * trainable if setup.lora_adapters and setup.lora_r > 0 else 0),
        cpu_offload=cpu,
        trainable_params=trainable,
        sync_peak=sync_peak,
        generation_peak=generation_peak,
    )


# ---------------------------------------------------------------------------------------------- CLI
def _gib(x: float) -> str:
    return f"{x / GIB:7.2f} GiB"


def report(shape: ModelShape, setup: TrainSetup, est: MemoryEstimate) -> str:
    """A human-readable table with the verdict for 24 GB and 80 GB cards."""
    seq = setup.prompt_tokens + image_tokens(shape, setup.max_pixels) * setup.images + setup.completion_tokens
    layout = (
        f"ZeRO-{setup.zero}" if setup.zero else ("FSDP2 (full shard)" if setup.fsdp else "no DeepSpeed (DDP)")
    )
    if setup.zero:
        adam = "AdamW: fp32 master + 2 moments"
    elif setup.fsdp and setup.bf16_autocast:
        adam = "AdamW: 2 fp32 moments of the fp32 masters FSDP2 keeps under bf16 mixed precision"
    else:
        adam = f"AdamW: 2 moments in {'fp32' if setup.lora_r or setup.weight_bytes == 4 else 'bf16'}"
    moe = ""
    if shape.active_params:
        moe = f", {shape.active_params / 1e9:.2f}B active per token: {shape.experts_per_token} of {shape.experts} experts"
    lines = [
        f"model       {shape.name}: {shape.total_params / 1e9:.2f}B params "
        f"({shape.vision_params / 1e9:.2f}B vision{moe}), trainable {est.trainable_params / 1e9:.3f}B",
        f"setup       {setup.gpus} GPU(s), {layout}{' + offload' if setup.offload else ''}, "
        f"weights {'bf16' if setup.weight_bytes == 2 else 'fp32'} as loaded, bf16 mixed precision "
        f"{'on' if setup.bf16_autocast else 'off'}, generation {setup.generation}"
        f"{f', LoRA r={setup.lora_r}' if setup.lora_r else ''}, batch {setup.batch} x {seq} tokens "
        f"({image_tokens(shape, setup.max_pixels) * setup.images} image tokens), "
        f"gradient checkpointing {'on' if setup.gradient_checkpointing else 'off'}",
        "",
        "per training GPU",
        f"  weights      {_gib(est.weights)}",
        f"  gradients    {_gib(est.gradients)}",
        f"  optimizer    {_gib(est.optimizer)}  ({adam})",
        f"  gathered     {_gib(est.gathered)}  ({'FSDP2' if setup.fsdp else 'ZeRO-3'} working set)",
        f"  reference    {_gib(est.reference)}  (GRPO's KL reference model, beta > 0)",
        f"  activations  {_gib(est.activations)}",
        f"  logits       {_gib(est.logits)}",
        f"  overhead     {_gib(est.overhead)}",
        f"  total        {_gib(est.training)}  (training step)",
        f"  sync peak    {_gib(est.sync_peak)}  (vLLM weight sync, on top of the model states)",
        f"  gen. peak    {_gib(est.generation_peak)}  (HF generation: KV cache{', gathered model' if setup.zero == 3 else ''})",
        f"  peak         {_gib(est.peak)}  (what the fits below are judged on)",
        f"vLLM engine  {_gib(est.vllm_min)}  (bf16 weights + KV cache, tensor parallel 1)",
    ]
    if est.cpu_offload:
        lines.append(f"CPU RAM      {_gib(est.cpu_offload)}  offloaded states, all ranks together")
    lines.append("")
    util = setup.vllm_gpu_memory_utilization
    for card in CARDS_GB:
        colocate = "fits" if est.fits_colocate(card, util) else "does not fit"
        server = "fits" if est.fits_server(card) else "does not fit"
        lines.append(
            f"{card} GB card: colocated vLLM (gpu_memory_utilization {util}) {colocate}; "
            f"training with separate vLLM servers {server}"
        )
    return "\n".join(lines)


def memory_report(model: str, setup: TrainSetup, as_json: bool = False) -> str:
    """``r1vision estimate-memory``'s output for ``model`` (folder, config.json, Hub id or built-in shape)
    trained as ``setup``: the text report, or the numbers as JSON."""
    shape = shape_of(load_model_config(model))
    est = estimate(shape, setup)
    if not as_json:
        return report(shape, setup, est)
    out = {k: getattr(est, k) for k in est.__dataclass_fields__}
    out["training"] = est.training
    out["model_states"] = est.model_states
    out["peak"] = est.peak
    for card in CARDS_GB:
        out[f"fits_{card}gb_colocate"] = est.fits_colocate(card, setup.vllm_gpu_memory_utilization)
        out[f"fits_{card}gb_server"] = est.fits_server(card)
    return json.dumps(out, indent=2)


__all__ = [
    "ModelShape",
    "builtin_shapes",
    "TrainSetup",
    "MemoryEstimate",
    "estimate",
    "shape_of",
    "load_model_config",
    "memory_report",
]
