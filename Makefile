# Two commands on a fresh clone: `make train` and `make test` (each installs on demand).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_VERSION := 2.13.0
TORCH_INDEX ?=
ARGS ?=

.PHONY: help install train test test-fast browser lint format bench bench-mfu bench-gpu wheelhouse gpu-kit clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade pip >/dev/null
	# torch first, pinned: the project's requirement is a range, which pip would otherwise fill with the newest
	# build (multi-GB with CUDA). Which build 2.13.0 is, CPU or CUDA, is the index's: TORCH_INDEX names another
	$(BIN)/pip install torch==$(TORCH_VERSION) $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(BIN)/pip install -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## create .venv with torch==2.13.0 and the project (editable, with dev tools)

train: $(STAMP)  ## train the default recipe (Multi30k en-de, tiny Transformer); e.g. make train ARGS="data=toy"
	$(BIN)/python train.py $(ARGS)

# the suite runs its test files on one worker per core (at most 4: each worker holds its own torch and
# caches); conftest.py gives each worker its share of the cores. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= auto
test: $(STAMP) browser  ## run the whole test suite (CPU, offline)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile $(ARGS)

# headless Chromium for the test that opens a sweep's report.html; where the system packages cannot be
# installed (no root, no apt) that test is skipped with its reason, nothing fails here
browser:  ## install headless Chromium from the system packages (for the report.html test)
	@command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || \
	  { command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
	    (apt-get install -y -q chromium-headless-shell >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium-headless-shell >/dev/null 2>&1)) ; } || \
	  echo "headless Chromium not installed: the report.html rendering test will be skipped"

test-fast: $(STAMP)  ## tests without the end-to-end training runs
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --maxprocesses=4 --dist loadfile -m "not slow" $(ARGS)

lint: $(STAMP)  ## ruff check + format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)  ## apply ruff fixes and formatting
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)  ## speed benchmarks, appended to BENCHMARKS.md (ARGS="--steps 50 ..." are theirs), then CPU MFU printed
	$(BIN)/python -m benchmarks $(ARGS)
	$(BIN)/python -m benchmarks.mfu

bench-gpu: $(STAMP)  ## tiny recipe on the GPU: ms/update, greedy validation, 1-8 runs sharing it (ARGS="--full --mfu")
	$(BIN)/python -m benchmarks.gpu $(ARGS)

# a GPU machine without internet whose Python already holds PyTorch and Lightning lacks only these: fetch
# them here as wheels for its Python (PY=3.12), copy wheelhouse/ there and install them with
#   pip install --no-index --no-deps --target DIR wheelhouse/*.whl; export PYTHONPATH=DIR
# (antlr4's runtime is published as source only: built into a wheel here; sacremoses needs regex, joblib,
# click and tqdm, which such an image holds)
PY ?= 3.12
wheelhouse: $(STAMP)  ## wheels of hydra-core, omegaconf, antlr4, sacremoses and the joblib launcher for an offline GPU machine (PY=3.12)
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(PY) --implementation py \
	  --platform any -d wheelhouse hydra-core==1.3.8 omegaconf==2.3.1 sacremoses==0.2.0 hydra-joblib-launcher==1.2.0
	$(BIN)/pip wheel -q --no-deps -w wheelhouse antlr4-python3-runtime==4.9.3

# the corpora (from NMT_DATA) and the tokenizers and encodings derived from them, for the same machine: with
# wheelhouse/ and gpu-kit/ there, export NMT_DATA=<there>/gpu-kit/data NMT_CACHE=<there>/gpu-kit/cache
gpu-kit: $(STAMP) wheelhouse  ## gpu-kit/ (Multi30k and its cached encodings) and wheelhouse/, for an offline GPU machine
	$(BIN)/python -m benchmarks.gpu_kit --out gpu-kit $(ARGS)

bench-mfu: $(STAMP)  ## model-FLOPs utilisation of training, fp32 and bf16 (ARGS="--device cuda --compile ...")
	$(BIN)/python -m benchmarks.mfu $(ARGS)

clean:  ## remove run outputs and caches (keeps .venv)
	rm -rf runs outputs multirun .pytest_cache .ruff_cache
