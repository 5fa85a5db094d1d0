# make demo   run the demo (main job)
# make test   lint, then the test suite
# make test-py312  the node, engine, replay, safety and robot-install tests on Python 3.12
# make setup  build .venv: pinned requirements, msg/ interfaces, this project in editable mode
# make policy rebuild data/policy/sim_demo from its recipe, config/train/sim_demo.yaml
# make bench-gpu  the paper's benchmark settings with pi05 on a CUDA GPU, into out/bench-gpu
#
# Each setup step leaves a stamp in .venv/.stamps named after a hash of the files it reads, so
# a second `make setup` does nothing, and editing a .msg or requirements.txt redoes only the
# steps that read it. Deleting .venv resets everything.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := setup

# DDS discovery must stay on loopback (this workplace allows no other traffic).
export ROS_AUTOMATIC_DISCOVERY_RANGE := LOCALHOST

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMPS := $(VENV)/.stamps
PYTEST_ARGS ?=
DEMO_ARGS ?= --sim

content_hash = $(shell cat $(1) | sha256sum | cut -c1-16)
REQ_STAMP := $(STAMPS)/requirements-$(call content_hash,requirements.txt)
MSG_STAMP := $(STAMPS)/msgs-$(call content_hash,requirements.txt $(sort $(wildcard msg/*.msg)) \
	CMakeLists.txt package.xml cmake/fix_manylinux_includes.cmake scripts/build_msgs.sh)
PKG_STAMP := $(STAMPS)/editable-$(call content_hash,setup.py pyproject.toml)

# Replaces the step's older stamps with the current one.
define mark_done
rm -f $(STAMPS)/$(1)-* && mkdir -p $(STAMPS) && touch $@
endef

.PHONY: setup lint test test-py312 demo policy bench-gpu clean

setup: $(REQ_STAMP) $(MSG_STAMP) $(PKG_STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(REQ_STAMP): | $(BIN)/python
	$(BIN)/python -m pip install --progress-bar off -r requirements.txt
	$(call mark_done,requirements)

$(MSG_STAMP): | $(REQ_STAMP)
	scripts/build_msgs.sh $(VENV) build/msgs-$(notdir $(VENV))
	$(call mark_done,msgs)

# --no-deps: requirements.txt is the one place that pins dependencies.
$(PKG_STAMP): | $(REQ_STAMP)
	$(BIN)/python -m pip install --progress-bar off --no-deps -e .
	$(call mark_done,editable)

lint: setup
	$(BIN)/ruff check .

# test_node.py runs in a process of its own: its /rosout checks went quiet mid-module in
# two full runs (never alone), as when another module's node of the same name is torn down
# in the same process; on a robot the node has its process to itself. Exit 5 (every test
# deselected, e.g. PYTEST_ARGS="-m 'not ros'") is not a failure. The main run prints its 25
# slowest tests (the suite's budget is 15 minutes on 2 cores).
test: lint
	$(BIN)/python -m pytest test/test_node.py $(PYTEST_ARGS) || [ $$? -eq 5 ]
	$(BIN)/python -m pytest test --ignore=test/test_node.py --ignore=$(INSTALL_TEST) \
		--durations=25 $(PYTEST_ARGS)

# Jazzy's Python (3.12, a Thor's Ubuntu 24.04) in a second venv with the same pins (Kilted's
# cp312 wheels): the node, engine, replay and safety tests, and the robot install script
# (scripts/install_robot.sh, against these wheels laid out as /opt/ros/<distro>), which runs
# only here. .ci/run runs it after `make test`.
PY312 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12*/bin/python3.12) python3.12)
INSTALL_TEST := test/test_install_robot.py
PY312_TESTS := $(INSTALL_TEST) $(addprefix test/test_,$(addsuffix .py,node_process \
	node_signals node_handover enable_estop motion control_step frame worker router inputs params \
	convert topics spin engine kv_pool scheduler handover timeline rtc replay replay_handover \
	bagio bag_recover_chunks gate joint_limits limits_source velocity checkpoint \
	openpi_reference platform_check fastdds_profile compile_cache))
test-py312:
	$(MAKE) setup VENV=.venv-py312 PYTHON=$(PY312)
	.venv-py312/bin/python -m pytest test/test_node.py $(PYTEST_ARGS) || [ $$? -eq 5 ]
	.venv-py312/bin/python -m pytest $(PY312_TESTS) $(PYTEST_ARGS)

demo: setup
	$(BIN)/oxygen-demo $(DEMO_ARGS)

# The shipped policy's stages are data: config/train/sim_demo.yaml (about 30 min on 2
# cores: it continues data/policy/sim_before_contacts). A rerun skips the stages done
# before with the same flags, resumes one that stopped and retrains the ones whose flags
# changed, under out/recipe/sim_demo (delete it to start from scratch);
# POLICY_ARGS="--from-stage NAME" retrains NAME and the stages that read it.
POLICY_RECIPE ?= config/train/sim_demo.yaml
POLICY_ARGS ?=
policy: setup
	$(BIN)/oxygen-train --recipe $(POLICY_RECIPE) $(POLICY_ARGS)

# `oxygen-bench engine --paper-gpu` (pi05 in bfloat16, k 1/5/10, N=30, S=10, uniform:1; sized for
# about 8 minutes of an H200 with compilation, BENCHMARKS.md) writes bench.json, tables.md
# and the plots into out/bench-gpu. It first adds JAX's CUDA plugin to .venv: CUDA=13
# (default; NVIDIA driver 580 or newer) or CUDA=12 (driver 525 or newer), at the version
# scripts/robot_requirements.py reads from requirements.txt (once: a stamp; PyPI needed),
# and keeps compiled executables in out/bench-gpu/xla-cache, so that a rerun skips
# compiling. BENCH_GPU_ARGS adds or overrides flags; with "--backend cpu" nothing is
# installed (BENCH_GPU_ARGS="--preset tiny --dtype float32 --backend cpu" is what the tests run).
CUDA ?= 13
JAX_VERSION := $(shell sed -n 's/^jax\[cpu\]==//p' requirements.txt)
CUDA_STAMP := $(STAMPS)/cuda$(CUDA)-$(JAX_VERSION)
BENCH_GPU_ARGS ?=

$(CUDA_STAMP): | $(REQ_STAMP)
	@nvidia-smi -L >/dev/null 2>&1 || { echo "bench-gpu: no NVIDIA GPU (nvidia-smi -L failed); \
	BENCH_GPU_ARGS='--backend cpu' runs on the CPU" >&2; exit 1; }
	spec=$$($(BIN)/python scripts/robot_requirements.py --jax cuda$(CUDA)); \
	$(BIN)/python -m pip uninstall -y -q jax-cuda12-plugin jax-cuda12-pjrt jax-cuda13-plugin \
		jax-cuda13-pjrt; \
	$(BIN)/python -m pip install --progress-bar off "$$spec"
	rm -f $(STAMPS)/cuda1*-*  # one CUDA plugin at a time
	$(call mark_done,cuda$(CUDA))

bench-gpu: setup $(if $(findstring --backend cpu,$(BENCH_GPU_ARGS)),,$(CUDA_STAMP))
	JAX_COMPILATION_CACHE_DIR=out/bench-gpu/xla-cache \
	$(BIN)/oxygen-bench engine --paper-gpu --out out/bench-gpu $(BENCH_GPU_ARGS)

clean:
	rm -rf build
