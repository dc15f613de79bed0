# Sourced by the inference launchers: what the closing `r1vision eval` needs, read from the `r1vision infer`
# arguments ("$@"). Sets TASK, DATASET, OUT (empty when not given) and SPLIT (default test).
TASK="" DATASET="" OUT="" SPLIT="test"
_args=("$@")
for ((_i = 0; _i < ${#_args[@]}; _i++)); do
  case "${_args[$_i]}" in
    --task) TASK="${_args[$((_i + 1))]:-}" ;;
    --task=*) TASK="${_args[$_i]#*=}" ;;
    --dataset) DATASET="${_args[$((_i + 1))]:-}" ;;
    --dataset=*) DATASET="${_args[$_i]#*=}" ;;
    --output_dir | --output-dir) OUT="${_args[$((_i + 1))]:-}" ;;
    --output_dir=* | --output-dir=*) OUT="${_args[$_i]#*=}" ;;
    --split) SPLIT="${_args[$((_i + 1))]:-}" ;;
    --split=*) SPLIT="${_args[$_i]#*=}" ;;
  esac
done
