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
# Two evaluations run at a time (one per core); EPISODES per family (default 150);
# CONTROLLERS (default "jtc jtc_replacement") the hand-over rows' controller models. An
# evaluation writes its file when it ends, so a rerun into the same OUT skips the ones
# that finished and runs the rest again (the same seeds give the same episodes).
set -euo pipefail

checkpoint=${1:-data/policy/sim_demo}
out=${2:-out/claims/$(basename "$checkpoint")}
beta=${BETA:?"set BETA, rtc's max guidance, chosen on dev seeds (oxygen-eval sweep --first-seed 400000)"}
episodes=${EPISODES:-150}
controllers=${CONTROLLERS:-jtc jtc_replacement}
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

# Two lanes, one per core, of about equal work: the policy with its baselines then rtc;
# isolated mode then replace and blend.
lane_oxygen() {
    once "$out/oxygen.json" "$out/oxygen.log" \
        "$bin/oxygen-eval" in-process "${common[@]}" --with-baselines --json "$out/oxygen.json"
    for controller in $controllers; do
        once "$out/handover/$controller/rtc/sweep.json" "$out/handover_${controller}_rtc.log" \
            "$bin/oxygen-eval" sweep "${common[@]}" --delays 1,4 --controller "$controller" \
            --handovers rtc --rtc-max-guidance "$beta" --out "$out/handover/$controller/rtc"
    done
}
lane_isolated() {
    once "$out/isolated.json" "$out/isolated.log" \
        "$bin/oxygen-eval" in-process "${common[@]}" --mode isolated --json "$out/isolated.json"
    for controller in $controllers; do
        once "$out/handover/$controller/replace_blend/sweep.json" \
            "$out/handover_${controller}_replace_blend.log" \
            "$bin/oxygen-eval" sweep "${common[@]}" --delays 1,4 --controller "$controller" \
            --handovers replace,blend --out "$out/handover/$controller/replace_blend"
    done
}
lane_oxygen &
pid=$!
lane_isolated
wait "$pid"  # a failed evaluation stops its lane (set -e) and the script
echo "claims of $checkpoint (test seeds $test_first.., $episodes per family) in $out"
