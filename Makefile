# CNN-parallel: `make compare` runs every framework on the default data and prints
# the table; `make test` runs the lint and the whole test suite (what CI runs);
# `make test-fast` the quick subset for the edit loop. All build the main env first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
REQ_HASH := $(shell sha1sum requirements.txt | cut -c1-12)
STAMP := $(VENV)/.installed-$(REQ_HASH)
ARGS ?=
# The legacy env: theano-pymc, Lasagne 0.1, Keras 2.3.1 on numpy 1.23 (see README)
LEGACY_VENV := .venv-legacy
LEGACY_PY := $(LEGACY_VENV)/bin/python
LEGACY_REQ_HASH := $(shell sha1sum requirements-legacy.txt | cut -c1-12)
LEGACY_STAMP := $(LEGACY_VENV)/.installed-$(LEGACY_REQ_HASH)
# The interpreter .venv-legacy is built with: a Python 3.11 (numpy 1.23 has no wheel for a
# later one), e.g. `make legacy-setup LEGACY_PYTHON=python3.11` where python3 is another.
LEGACY_PYTHON ?= $(PYTHON)

.PHONY: all setup legacy-setup gpu-setup caffe browser compare lint test test-fast baseline drift envelope power power-whole benchmark clean-results gpu-check
all: compare

# The main virtual environment, rebuilt when requirements.txt changes.
$(STAMP): requirements.txt
	@echo "[setup] creating $(VENV) (TensorFlow, Keras 3, PyTorch, JAX; about 2 minutes the first time)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	rm -f $(VENV)/.installed-*
	touch $@

setup: $(STAMP)

# The legacy env, rebuilt when requirements-legacy.txt changes. Theano links OpenBLAS
# (libopenblas-dev, from apt when missing). setuptools<81 first: lasagne 0.1 needs
# pkg_resources; numpy and scipy next: theano-pymc builds against them.
$(LEGACY_STAMP): requirements-legacy.txt
	@echo "[legacy-setup] creating $(LEGACY_VENV) (theano-pymc, Lasagne, Keras 2.3.1; about a minute the first time)"
	@version=$$($(LEGACY_PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || { \
	  echo "[legacy-setup] error: LEGACY_PYTHON=$(LEGACY_PYTHON) cannot be run; fix: make legacy-setup LEGACY_PYTHON=python3.11"; exit 1; }; \
	[ "$$version" = 3.11 ] || { echo "[legacy-setup] error: LEGACY_PYTHON=$(LEGACY_PYTHON) is Python $$version, and numpy 1.23 needs 3.11; fix: make legacy-setup LEGACY_PYTHON=python3.11"; exit 1; }
	@dpkg -s libopenblas-dev >/dev/null 2>&1 || (apt-get update && apt-get install -y libopenblas-dev) || { \
	  echo "[legacy-setup] error: libopenblas-dev is missing and apt-get could not install it; fix: sudo apt-get install libopenblas-dev"; exit 1; }
	$(LEGACY_PYTHON) -m venv $(LEGACY_VENV)
	$(LEGACY_PY) -m pip install --quiet --upgrade pip wheel "setuptools<81"
	$(LEGACY_PY) -m pip install --quiet $$(grep -E '^(numpy|scipy)==' requirements-legacy.txt)
	$(LEGACY_PY) -m pip install --quiet -r requirements-legacy.txt
	rm -f $(LEGACY_VENV)/.installed-*
	touch $@

legacy-setup: $(LEGACY_STAMP)

# The opt-in GPU environment (docs/gpu.md): .venv-gpu, the CUDA builds of torch, TensorFlow and
# jax (requirements-gpu.txt) and every other line of requirements.txt; gigabytes of CUDA
# libraries, downloaded only by this target: no other target builds or needs it, and .venv stays
# the CPU env. Then: .venv-gpu/bin/python run_all.py --device gpu (the Theano family and Caffe run
# in their own envs, on the CPU). The last step fails, naming the build, where pip installed a
# CPU build (a local wheel cache that holds torch's +cpu wheel, say).
GPU_VENV := .venv-gpu
GPU_PY := $(GPU_VENV)/bin/python
GPU_REQ_HASH := $(shell cat requirements.txt requirements-gpu.txt | sha1sum | cut -c1-12)
GPU_STAMP := $(GPU_VENV)/.installed-$(GPU_REQ_HASH)
$(GPU_STAMP): requirements.txt requirements-gpu.txt
	@echo "[gpu-setup] creating $(GPU_VENV) (torch, TensorFlow and jax built for CUDA: several GB the first time)"
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_PY) -m pip install --quiet --upgrade pip
	grep -v -E '^(tensorflow-cpu|torch|jax|jaxlib)==' requirements.txt > $(GPU_VENV)/requirements-main.txt
	$(GPU_PY) -m pip install --quiet -r requirements-gpu.txt -r $(GPU_VENV)/requirements-main.txt
	$(GPU_PY) -c 'import sys; from backends.gpu_builds import jax_build, tensorflow_build, torch_build; \
	  why = [w for w in (torch_build(), tensorflow_build(), jax_build()) if w]; \
	  sys.exit("[gpu-setup] error: " + "; ".join(why) if why else 0)'
	rm -f $(GPU_VENV)/.installed-*
	touch $@

gpu-setup: $(GPU_STAMP)

# Real Caffe (pycaffe, CPU only) built from the PyPI sdist brocolli-caffe into a cache
# outside the clone (~/.cache/cnn-parallel/caffe): about 11 minutes the first time,
# seconds once cached. Installs apt build dependencies when missing.
caffe: setup
	bash caffe_wrapper/build_caffe.sh $(PY)

# Debian's Chromium, from apt when missing: `make test` opens the HTML report in it, headless
# (tests/helpers/headless_chromium.py; a test marked slow), and fails, never skips, without it.
browser:
	@[ -x /usr/bin/chromium ] || (apt-get update && apt-get install -y chromium) || { \
	  echo "[browser] error: chromium is missing and apt-get could not install it; fix: sudo apt-get install chromium"; exit 1; }

# Builds the main env; run_all.py builds the legacy env and Caffe for the frameworks it runs,
# and one that cannot be built is a table row with the reason and the fix, not a stop (docs/legacy.md).
# `make test` and the targets below still need every one built.
compare: setup
	$(PY) run_all.py $(ARGS)

# ruff (pyproject.toml): lint and format check, seconds
lint: setup
	$(PY) -m ruff check --no-cache .
	$(PY) -m ruff format --check --no-cache .

# tests/ runs on XDIST workers (pytest-xdist; most of its tests wait on one process at a time,
# so one core is idle without them; tests/conftest.py keeps each file on one worker and the
# network-namespace files on one together), and tests/legacy/ in the legacy env beside them,
# its output kept in results/legacy-tests.log and shown at the end; status 5 there (no test
# selected by ARGS) is fine. XDIST=0: tests/ in this process, one test at a time.
XDIST ?= 2
XDIST_FLAGS := $(if $(filter 0,$(XDIST)),-p no:xdist,-n $(XDIST) --dist loadgroup)
test: lint legacy-setup caffe browser
	@mkdir -p results
	$(LEGACY_PY) -m pytest -q tests/legacy $(ARGS) > results/legacy-tests.log 2>&1 & legacy=$$!; \
	$(PY) -m pytest -q $(XDIST_FLAGS) --durations=25 tests $(ARGS); main=$$?; \
	wait $$legacy; status=$$?; \
	echo "[test] tests/legacy/ (in $(LEGACY_VENV), run beside tests/):"; cat results/legacy-tests.log; \
	{ [ $$status -eq 0 ] || [ $$status -eq 5 ]; } && exit $$main; exit $$status

# The edit loop's subset (its budget: 4 minutes on 2 cores), main env only, with no Caffe or legacy
# env to build: it leaves out the tests marked slow (the multi-process, signal and
# every-framework runs), those marked caffe (they need pycaffe) and tests/legacy/. CI runs
# `make test`, which runs every one of them.
test-fast: lint
	$(PY) -m pytest -q $(XDIST_FLAGS) -m "not slow and not caffe" tests $(ARGS)

# The shipped reference runs in results/baseline/, every framework: seeds 0-2 of both
# networks for 3 epochs at the presets' batch sizes, and in results/baseline/default/ the
# main command's own default (`make compare`: the 3-layer net at batch 100, 10 epochs), the
# seed bands its verdicts rest on: seeds 0-9 of the main env's five (ten: enough to measure
# their false-alarm rate, docs/comparing.md), seeds 0-2 of Lasagne, Keras on Theano and
# Caffe (four times slower a step). Hours on 2 cores. Ordinary runs never write there;
# results/baseline/drift/ (`make drift`, `make envelope`) and results/baseline/agreement/
# (the report's far-apart line: its README) are kept.
BASELINE_NETWORKS := cnn2d_3layer_fullconnected_3layer cnn2d_2layer_full_connected_2layer
baseline: setup legacy-setup caffe
	rm -rf results/baseline.new
	for network in $(BASELINE_NETWORKS); do for seed in 0 1 2; do \
	  $(PY) run_all.py --no_epoch_check --preset original --network $$network --num_epochs 3 --seed $$seed --run_id baseline-seed$$seed \
	    --results_dir results/baseline.new --results_log results/baseline.new/results.log --quiet || exit 1; \
	done; done
	for seed in 0 1 2 3 4 5 6 7 8 9; do \
	  only=$$([ $$seed -lt 3 ] || echo --only tensorflow,keras_tensorflow,keras_torch,keras_jax,torch); \
	  $(PY) run_all.py --no_epoch_check $$only --seed $$seed --run_id baseline-seed$$seed --results_dir results/baseline.new/default \
	    --results_log results/baseline.new/default/results.log --quiet || exit 1; \
	done
	for dir in results/baseline.new results/baseline.new/default; do \
	  rm -rf $$dir/predictions $$dir/caffe $$dir/compare $$dir/tensorboard $$dir/build $$dir/logs; done
	for kept in drift agreement; do \
	  if [ -d results/baseline/$$kept ]; then mv results/baseline/$$kept results/baseline.new/$$kept; fi; done
	rm -rf results/baseline
	mv results/baseline.new results/baseline

# Parity mode, every framework twice: run-to-run next to cross-framework drift (results/drift/)
drift: setup legacy-setup caffe
	$(PY) -m algorithms.studies.drift $(ARGS)

# The float32 drift envelope the parity verdicts rest on, at the main command's settings:
# the main env's frameworks in parity mode, 50 steps (results/baseline/drift/envelope_<network>.csv)
envelope: setup caffe
	$(PY) -m algorithms.studies.drift --envelope $(ARGS)

# The parity regime's confusion table: the envelope's runs (make envelope ARGS=--run_id envelope50) as the
# drift sources, and real errors through real flags, each with its verdict and step (docs/comparing.md)
power: setup
	$(PY) -m algorithms.studies.power $(ARGS)

# The verdict's known answers on whole runs, run by default: errors that start past the horizon in the
# main command's run, the BN and padding faults in the example networks, every honest pair (docs/comparing.md)
power-whole: setup legacy-setup caffe
	$(PY) -m algorithms.studies.whole_runs $(ARGS)

# Harness vs native loops, GEMM peak and MFU, threads, compiled paths, RSS, data path
# (results/benchmark/); under 10 minutes on 2 cores
benchmark: setup legacy-setup caffe
	$(PY) benchmark.py $(ARGS)

# The one-command GPU check (docs/gpu.md): under 10 minutes on one GPU, with the machine's own
# Python (torch and jax with CUDA; keras brought along, ARGS=--keras_path DIR); no setup, since a
# GPU machine may have no network. ARGS=--dry-run: the same on CPU, tiny sizes (the tests run it).
GPU_PYTHON ?= $(if $(wildcard $(PY)),$(PY),$(PYTHON))
gpu-check:
	$(GPU_PYTHON) gpu_check.py $(ARGS)

clean-results:
	rm -rf results/*.csv results/predictions results.log
