# Sourced by the sbatch scripts (from the repository root): preemption and requeue.
# Slurm sends the job's tasks SIGUSR1 five minutes before its time limit (#SBATCH --signal=USR1@300), and a
# preemption sends SIGTERM: r1vision then saves a checkpoint at the next step boundary, writes
# OUTPUT_DIR/preempted.json and exits (75). The job requeues itself (#SBATCH --requeue) and the requeued
# run resumes (--resume_from_checkpoint auto: the newest complete checkpoint, or a fresh start).

# The --output_dir value of a training command line (either spelling, "--output_dir X" or "--output_dir=X").
r1v_output_dir() {
  local previous=""
  for arg in "$@"; do
    case "$previous" in --output_dir|--output-dir) echo "$arg"; return ;; esac
    case "$arg" in --output_dir=*|--output-dir=*) echo "${arg#*=}"; return ;; esac
    previous="$arg"
  done
}

# After the training step: requeue the job when the run stopped on a preemption signal.
r1v_requeue_if_preempted() {
  local out="$1"
  if [[ -n "$out" && -f "$out/preempted.json" && -n "${SLURM_JOB_ID:-}" ]]; then
    echo "preempted ($(cat "$out/preempted.json")); requeueing job $SLURM_JOB_ID" >&2
    scontrol requeue "$SLURM_JOB_ID"
  fi
}
