# electra-tf. Every target sets up (or refreshes) its own virtual environment from
# requirements.txt first and installs this package into it (`pip install -e .`, which also puts
# the electra-* commands on .venv/bin), so `make pretrain SIZE=small` and `make test` are the
# whole set-up.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

SIZE ?= small
DATA_DIR ?=
MODEL_NAME ?= electra_$(SIZE)
HPARAMS ?= {}
TASK ?= sst
DEFAULT_DATA := data/default
RUN_DATA_DIR := $(if $(DATA_DIR),$(DATA_DIR),$(DEFAULT_DATA))

.PHONY: venv test lint format pretrain default-data finetune export convert bench bench-curve bench-data bench-serve profile reliability compare-objectives learning-test parity parity-trajectory parity-curves clean-venv

$(STAMP): requirements.txt requirements-interop.txt pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet -r requirements-interop.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q tests

lint: $(STAMP)
	$(VENV)/bin/ruff check electra_tf data_prep tests bench tools
	$(VENV)/bin/ruff format --check electra_tf data_prep tests bench tools

format: $(STAMP)
	$(VENV)/bin/ruff format electra_tf data_prep tests bench tools
	$(VENV)/bin/ruff check --fix electra_tf data_prep tests bench tools

# With no DATA_DIR, build the embedded default corpus (no download) first; it is reused once built.
default-data: $(STAMP)
	$(PY) data_prep/build_default_corpus.py --data-dir $(DEFAULT_DATA)

# ELECTRA_STOP_WITH_PARENT: when make is stopped (a `timeout`, a kill), the run gets SIGTERM,
# saves and exits, instead of training on as an orphan.
pretrain: $(STAMP) $(if $(DATA_DIR),,default-data)
	ELECTRA_STOP_WITH_PARENT=1 $(PY) -m electra_tf.pretrain --data-dir $(RUN_DATA_DIR) --model-name $(MODEL_NAME) \
		--preset $(SIZE) --hparams '$(HPARAMS)'

# TASK_FILE=path.json: a task on your own data (README "Fine-tuning on your own data"), alone or
# with the tasks TASK names on the command line.
finetune: $(STAMP)
	$(PY) -m electra_tf.finetune --data-dir '$(RUN_DATA_DIR)' --model-name $(MODEL_NAME) \
		$(if $(TASK_FILE),--task-file '$(TASK_FILE)' $(if $(filter command line,$(origin TASK)),--tasks '$(TASK)',),--tasks '$(TASK)') \
		--hparams '$(HPARAMS)' $(if $(PRETRAINED),--pretrained $(PRETRAINED),)

export: $(STAMP)
	$(PY) -m electra_tf.export --data-dir $(RUN_DATA_DIR) --model-name $(MODEL_NAME) \
		$(if $(filter command line,$(origin TASK)),--task $(TASK),) \
		$(if $(PRETRAINED),--pretrained $(PRETRAINED),)

# make convert TO=hf INPUT=path OUTPUT=path [FROM=original] [CONVERT_FLAGS="--dry-run --overwrite"]
convert: $(STAMP)
	$(PY) -m electra_tf.convert --from $(or $(FROM),auto) --to $(TO) --input $(INPUT) \
		--output $(OUTPUT) $(CONVERT_FLAGS)

# The benchmarks, modules of bench/ (bench/README.md: what each measures, the latest figures).
# PEER_PYTHON=<a python with torch, transformers, onnx, onnxruntime>: the Hugging Face PyTorch and
# ONNX Runtime rows (bench/README.md says how to make one); without it they are reported skipped.
# SEQ_LENGTHS=128,256,512: `make bench` at each length; `make bench-curve`'s lengths.
# CONFIGS=default,pretrain-run: `make bench`'s rows (bench/README.md lists them), e.g. the whole
# pre-training run beside its step.
# Each writes its table as JSON and as a picture under data/ (bench_train.json and .png, ...).
PEER_ENV := $(if $(PEER_PYTHON),ELECTRA_PEER_PYTHON=$(PEER_PYTHON),)
bench: $(STAMP)
	mkdir -p data
	$(PEER_ENV) $(PY) -m bench.bench_train $(if $(SEQ_LENGTHS),--seq-lengths $(SEQ_LENGTHS),) \
		$(if $(CONFIGS),--configs $(CONFIGS),) --json data/bench_train.json

# Cost against sequence length: training, serving and attention's share, with the peers.
bench-curve: $(STAMP)
	mkdir -p data
	$(PEER_ENV) $(PY) -m bench.cost_curve $(if $(SEQ_LENGTHS),--seq-lengths $(SEQ_LENGTHS),) \
		--json data/bench_curve.json

bench-data: $(STAMP)
	$(PY) -m bench.bench_data

# BASELINE=<another checkout>: its export timed in the same run. The bfloat16 export is timed
# beside the float32 one (PRECISION=<another> for another serving precision), and the float32
# export through OpenVINO (`python -m electra_tf.export_openvino`) where openvino is installed.
bench-serve: $(STAMP)
	mkdir -p data
	$(PEER_ENV) $(PY) -m bench.bench_serve $(if $(BASELINE),--baseline $(BASELINE),) \
		--precision $(or $(PRECISION),bfloat16) --json data/bench_serve.json

# Where a step's time goes: op-level shares (and attention's) of the train step and of serving.
# Run it alone on the machine; the per-op JSON (several MB) goes to data/.
profile: $(STAMP)
	mkdir -p data
	$(PY) -m bench.profile_breakdown --out data/profile_breakdown.json \
		$(if $(SEQ),--seq $(SEQ),)

# The reliability cases (tests that record what they expected and got), replayed against this
# build: one line per case (case, expected, got, OK/BAD).
reliability: $(STAMP)
	$(PY) -m tools.reliability_replay

# The synthetic-language learning test (docs/learning-test.md): random init, masked LM and
# ELECTRA; SEEDS (default 3) and MINUTES (CPU minutes of pre-training per objective, default 1).
# Results in data/learning_test.json, the per-seed picture in data/learning_test.png.
learning-test: $(STAMP)
	mkdir -p data
	$(PY) -m electra_tf.evaluation.learning_test --seeds $(or $(SEEDS),3) --minutes $(or $(MINUTES),1) \
		--json data/learning_test.json

# Pre-training objectives (configs/ablations/*.json) at equal wall time, then SST-2 from each
# (electra_tf/evaluation/compare_objectives.py; its docstring has the rules). MINUTES: per objective.
#   make compare-objectives OBJECTIVES=electra,bert_mlm MINUTES=30 DATA_DIR=data/g64 \
#     PRESET=gutenberg PARALLEL=2 WARMUP=0.125 [GLUE_DIR=...] [HPARAMS='{...}'] [COMPARE_ARGS=--quick]
# GLUE_DIR: SST-2's train.tsv and dev.tsv; by default $(RUN_DATA_DIR)/glue/SST-2 (put them there,
# or name their folder; COMPARE_ARGS=--no-finetune stops after pre-training).
# Run the same command again to resume; results in $(RUN_DATA_DIR)/compare_objectives/results.md.
OBJECTIVES ?= electra,electra_15,replace_mlm,all_tokens_mlm,bert_mlm,electric
PRESET ?= $(SIZE)
PARALLEL ?= 1
GLUE_DIR ?= $(RUN_DATA_DIR)/glue/SST-2
compare-objectives: $(STAMP) $(if $(DATA_DIR),,default-data)
	@[ -n "$(MINUTES)" ] || { echo "error: MINUTES (wall time per objective) is required"; exit 2; }
	$(PY) -m electra_tf.evaluation.compare_objectives --data-dir $(RUN_DATA_DIR) \
		--objectives $(OBJECTIVES) --minutes $(MINUTES) --preset $(PRESET) --hparams '$(HPARAMS)' \
		--parallel $(PARALLEL) --glue-dir $(GLUE_DIR) $(if $(WARMUP),--warmup $(WARMUP),) $(COMPARE_ARGS)

# Parity with the original google-research/electra code (tools/original_parity/README.md).
# MIRROR: a git copy of it (git clone --mirror https://github.com/google-research/electra);
# defaults to $ELECTRA_ORIGINAL_MIRROR. STEPS: trajectory length (default 1000).
parity: $(STAMP)
	$(PY) -m tools.original_parity.check $(if $(MIRROR),--mirror $(MIRROR),)

parity-trajectory: $(STAMP)
	$(PY) -m tools.original_parity.trajectory $(if $(MIRROR),--mirror $(MIRROR),) \
		$(if $(STEPS),--steps $(STEPS),)

# Learning curves of both sides, each with its own randomness, on real text (DATA_DIR, default
# data/default, built first). STEPS (default 2000), SEEDS per side (default 3), ALSO_MUTATION
# (a bug to run beside, drawn in a third colour), RUNS_DIR (keep each run's curves there) and
# REPORT_ONLY=1 (no runs: the report and picture again from RUNS_DIR; no MIRROR needed).
# Results in data/parity_curves.json, the picture in data/parity_curves.png.
parity-curves: $(STAMP) $(if $(DATA_DIR),,default-data)
	mkdir -p data
	$(PY) -m tools.original_parity.curves $(if $(MIRROR),--mirror $(MIRROR),) --data-dir $(RUN_DATA_DIR) \
		$(if $(STEPS),--steps $(STEPS),) $(if $(SEEDS),--seeds $(SEEDS),) \
		$(if $(ALSO_MUTATION),--also-mutation $(ALSO_MUTATION),) $(if $(RUNS_DIR),--runs-dir $(RUNS_DIR),) \
		$(if $(PROJECT_PRECISION),--project-precision $(PROJECT_PRECISION),) \
		$(if $(REPORT_ONLY),--report-only,) --json data/parity_curves.json

clean-venv:
	rm -rf $(VENV)
