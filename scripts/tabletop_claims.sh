#!/usr/bin/env bash
# The tabletop figures a shipped checkpoint is reported with, on the test range
# (oxygen_core/sim/seeds.py: 500000-500999), run once per checkpoint after every choice
# (recipe, checkpoint, rtc's beta) was made on the dev range. From the repository root:
#
#   BETA=<rtc max guidance chosen on dev> scripts/tabletop_claims.sh [CHECKPOINT] [OUT]
#
# Writes into OUT (default out/claims/<checkpoint folder name>), each log starting with the commit it ran at:
#   oxygen.json     the policy in OxyGen mode next to hold still, random targets, the blind
#                   script and the touch probe: success per family with 95 % intervals, narration naming
#                   the target, texts ending at EOS, seams, the chunk gate
#   isolated.json   the same seeds in isolated mode (the same actions and greedy tokens)
#   handover/C/     replace, blend and rtc at d = 1 (this CPU's measured engine latencies
#                   for the demo preset) and d = 4 (OxyGen's 198 ms on Jetson Thor, from
#                   the paper, at 20 Hz) under each controller model C (jtc, the default,
#                   and jtc_replacement): success, time to success, seam jump, the arm's
#                   commands at each trajectory's arrival
# Two evaluations run at a time (one per core); EPISODES per family (default 150). An
# evaluation writes its file when it ends, so a rerun into the same OUT skips the ones
# that finished and runs the rest again (the same seeds give the same episodes).
set -euo pipefail

checkpoint=${1:-data/policy/sim_demo}
out=${2:-out/claims/$(basename "$checkpoint")}
beta=${BETA:?"set BETA, rtc's max guidance, chosen on dev seeds (oxygen-eval sweep --first-seed 400000)"}
episodes=${EPISODES:-150}
test_first=500000
bin=.venv/bin

mkdir -p "$out"
common=(--checkpoint "$checkpoint" --episodes "$episodes" --first-seed "$test_first")

# once RESULT LOG COMMAND...: run COMMAND unless RESULT exists; LOG gets the commit it ran
# at (its first line) and its output.
once() {
    local result=$1 log=$2
    shift 2
    if [[ -e "$result" ]]; then
        echo "kept $result ($(head -n 1 "$log"))"
    else
        { echo "commit $(git rev-parse HEAD)"; "$@"; } >"$log" 2>&1
    fi
}

once "$out/oxygen.json" "$out/oxygen.log" \
    "$bin/oxygen-eval" in-process "${common[@]}" --with-baselines --json "$out/oxygen.json" &
pid=$!
once "$out/isolated.json" "$out/isolated.log" \
    "$bin/oxygen-eval" in-process "${common[@]}" --mode isolated --json "$out/isolated.json"
wait "$pid"  # a failed evaluation stops the script (set -e)
for controller in jtc jtc_replacement; do
    sweep=("${common[@]}" --delays 1,4 --controller "$controller")
    once "$out/handover/$controller/replace_blend/sweep.json" \
        "$out/handover_${controller}_replace_blend.log" \
        "$bin/oxygen-eval" sweep "${sweep[@]}" --handovers replace,blend \
        --out "$out/handover/$controller/replace_blend" &
    pid=$!
    once "$out/handover/$controller/rtc/sweep.json" "$out/handover_${controller}_rtc.log" \
        "$bin/oxygen-eval" sweep "${sweep[@]}" --handovers rtc --rtc-max-guidance "$beta" \
        --out "$out/handover/$controller/rtc"
    wait "$pid"
done
echo "claims of $checkpoint (test seeds $test_first.., $episodes per family) in $out"
