# rlhf-toy: two commands for everyone.
#   make serve   create .venv if needed, install, serve the site at http://127.0.0.1:8000/
#   make test    the same set-up, then every check (one pytest run; see README)
# Other targets: make notebooks (rebuild docs/notebooks from notebooks/*.py), make build, make bench, make clean.
# make bench runs the seed benchmark; the others: .venv/bin/python benchmarks/{demos,compare,tiny_lm,site_weight}.py

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LIBS   := $(VENV)/.installed-libs

export NO_MKDOCS_2_WARNING := 1
export PYTHONHASHSEED := 0
# Same digits on every x86 machine: PyTorch's AVX-512 kernels round some sums differently from its AVX2
# kernels, and the pages print numbers to the last digit (see conftest.py). Ignored with a warning on ARM.
export ATEN_CPU_CAPABILITY := avx2

.PHONY: serve test build notebooks bench clean

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# TRL, verl and their pins, for the conformance and claim tests only (make serve does not install them).
$(LIBS): $(STAMP) requirements-libs.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -c requirements-lock.txt -r requirements-libs.txt
	touch $(LIBS)

serve: $(STAMP)
	$(PY) -m mkdocs serve --dev-addr 127.0.0.1:8000

# One intra-op thread: the book's tensors are tiny and threads only fight over the cores (also in
# notebook kernels and demo subprocesses, which read OMP_NUM_THREADS at start-up).
test: $(STAMP) $(LIBS)
	OMP_NUM_THREADS=1 MPLBACKEND=Agg $(PY) -m pytest

build: $(STAMP)
	$(PY) -m mkdocs build --strict

notebooks: $(STAMP)
	$(PY) scripts/build_notebooks.py

bench: $(STAMP)
	$(PY) benchmarks/seed.py

clean:
	rm -rf site .cache .pytest_cache
