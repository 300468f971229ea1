# Two commands on a fresh machine:  `make demo`  and  `make test`.
# Each creates .venv (Python 3.10+, CPU torch pinned for the samples and tests) on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

$(STAMP): pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

# the Python 3.12 targets' venv (sys.monitoring): starlette, uvicorn, LitServe, Ray Serve, transformers and
# torch 2.14.1 (the generation tests; ~2 min to install from the registry's files); their tests
# skip, saying so, where there is no such interpreter
PY312 ?= /root/.pyenv/versions/3.12.1/bin/python
VENV312 := .venv312
$(VENV312)/.installed: requirements-py312.txt
	@if [ -x "$(PY312)" ]; then \
	  $(PY312) -m venv $(VENV312) && $(VENV312)/bin/pip install -q -r requirements-py312.txt && touch $@; \
	else echo "no Python 3.12 at $(PY312): the ASGI tests will skip"; fi

# Holistic Trace Analysis in a venv of its own (requirements-hta.txt): the test that it reads
# our Kineto export skips, saying so, without it
VENVHTA := .venv-hta
$(VENVHTA)/.installed: requirements-hta.txt
	$(PYTHON) -m venv $(VENVHTA) && $(VENVHTA)/bin/pip install -q --no-deps -r requirements-hta.txt \
	  && touch $@ || echo "could not install Holistic Trace Analysis: its test will skip"

# bytecode caches are written (an environment may say not to): otherwise every test worker
# rewrites and compiles every test module, and every infertop a test starts compiles infertop
# (~0.25 s of CPU each time)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-together test-fast accuracy bench bench-vllm
demo: $(STAMP)
	$(VENV)/bin/infertop demo

# what .ci/run checks before the tests: the layers, ruff's pinned rules, mypy
.PHONY: lint
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check infertop
	$(VENV)/bin/mypy infertop

# the whole suite in two phases: every test but the `solo` ones on workers side by side
# (pytest-xdist), then the solo ones one at a time. Solo tests plant CPU hogs on a core (a
# starved target, a GIL that is not the cause) or plant the socket folder of user nobody that
# the other nobody tests use: beside other tests they would be the other tests' load. No test
# judges a share or a speed against a bar: that is make accuracy's and the benchmarks'. Both
# phases run; the target fails if either did. Four workers on the 2 cores: many tests wait on
# their targets (a watch's minute, 50 attach cycles), and none judges a speed, so a fourth
# fills the waits.
WORKERS ?= 4
test: $(STAMP) $(VENV312)/.installed $(VENVHTA)/.installed
	@rc=0; \
	$(PY) -m pytest -q -m "not solo" -n $(WORKERS) --dist worksteal || rc=$$?; \
	$(PY) -m pytest -q -m solo || rc=$$?; \
	exit $$rc

# every test at once, the solo ones beside the rest on the same workers: a quicker check of
# everything, where a solo test's hogs are the others' load
test-together: $(STAMP) $(VENV312)/.installed $(VENVHTA)/.installed
	$(PY) -m pytest -q -n $(WORKERS) --dist worksteal

# how true the stage shares are: the ground-truth targets recorded beside their own clocks, ours
# beside the truth and raw py-spy's, with the CPU other processes took (benchmarks/accuracy.py,
# ~8 min on 2 cores); docs/performance.md keeps the latest table. Not in CI: its numbers move
# with the machine
accuracy: $(STAMP) $(VENV312)/.installed
	$(PY) benchmarks/accuracy.py

# the inner loop: no real processes end to end, four workers on the 2 cores (pytest-xdist; the
# UI tests partly wait on their event loops), each taking work from the others when it runs out
# (worksteal: the snapshot tests, side by side in the file order, had made one worker the last
# by 45 s): 823 tests in ~49 s here (2026-12-07)
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n 4 --dist worksteal

bench: $(STAMP)
	$(PY) benchmarks/bench_overhead.py

# a real vLLM server on the CPU (a 5 GB venv of its own, .venv-vllm, ~2.5 min to install the
# first time) and what infertop record costs it and says of it (docs/performance.md); not in CI
bench-vllm: $(STAMP)
	scripts/vllm/setup.sh
	$(PY) benchmarks/bench_vllm.py
