"""Training pi0.5 on expert demonstrations (`oxygen-train`), with no ROS imports.

records   the per-step training record and the expert-episode source in the sim
dataset   records -> arrays: norm stats, the trained tokenizer, prompts, text targets
losses    flow matching on action chunks and next-token cross-entropy on stream texts
trainer   the optax loop: batches, validation, resumable state, checkpoints, curves
rollout   the trained policy in closed loop in the sim, in process (success, narration)
grounding the open-loop check: chunk error vs holding still, and whether chunks follow the
          instruction's target, its push direction and each camera
cli       `oxygen-train`, `oxygen-eval in-process`
recipe    `oxygen-train --recipe`: a policy's stages as data (config/train/), then their mean

A short run of a recipe variant and its grounding check, for comparison tables, is the
experiment harness scripts/experiments/train_variants.py, outside the package.
"""
