# Sourced by the 24 GB launchers: the `r1vision vllm-serve` flags that make the vLLM servers resize
# images and size sequences like the trainer. The recipe (--config) is read by vllm-serve itself; flags on
# the training command line override it there too. Sets MODEL (may stay empty: the recipe names it) and
# SERVE_FLAGS (an array).
MODEL=""
SERVE_FLAGS=()
_args=("$@")
for ((_i = 0; _i < ${#_args[@]}; _i++)); do
  _value="${_args[$((_i + 1))]:-}"
  case "${_args[$_i]}" in
    --model) MODEL="$_value"; SERVE_FLAGS+=(--model "$_value") ;;
    --config) SERVE_FLAGS+=(--config "$_value") ;;
    --min_pixels|--max_pixels|--max_images_per_prompt|--max_completion_length|--max_prompt_text_tokens)
      SERVE_FLAGS+=("$(echo "${_args[$_i]}" | tr _ -)" "$_value") ;;
    --vllm_max_model_length) SERVE_FLAGS+=(--max-model-len "$_value") ;;
  esac
done
if [[ -z "$MODEL" && ! " ${_args[*]} " =~ " --config " ]]; then
  echo "$(basename "$0"): --model (or a --config recipe naming the model) is required" >&2
  exit 2
fi
