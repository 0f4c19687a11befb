# rlhf-toy: two commands for everyone.
#   make serve   create .venv if needed, install, serve the site at http://127.0.0.1:8000/
#   make test    the same set-up, then every check (one pytest run; see README)
# Other targets: make pdf (the book as site/rlhf-toy.pdf),
# make notebooks (rebuild docs/notebooks from notebooks/*.py), make figures (redraw docs/figures and
# chapter 8's two figures: scripts/figures.py), make build, make bench, make clean.
# make bench runs the seed benchmark; the others: .venv/bin/python benchmarks/{demos,compare,tiny_lm,site_weight}.py

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
LIBS   := $(VENV)/.installed-libs

export NO_MKDOCS_2_WARNING := 1
export PYTHONHASHSEED := 0
# Same digits on every x86-64 machine: ATen, MKL and oneDNN each pick CPU-specific code at run time, and the
# pages print numbers to the last digit. The settings live in one file (also read by `import rlhf_toy`);
# exported here for everything make starts (pytest, notebook kernels, demo subprocesses, benchmarks).
include src/rlhf_toy/numerics.env
export $(shell sed -nE 's/^([A-Z_0-9]+)=.*/\1/p' src/rlhf_toy/numerics.env)

.PHONY: serve test build pdf notebooks figures bench clean

$(STAMP): pyproject.toml requirements-lock.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-lock.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $(STAMP)

# TRL, verl and their pins, for the conformance and claim tests only (make serve does not install them).
$(LIBS): $(STAMP) requirements-libs.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -c requirements-lock.txt -r requirements-libs.txt
	touch $(LIBS)

# Fast preview: after the first build only the saved page is rebuilt (--dirty, hooks/preview.py); the print page
# and llms.txt, which aggregate every page, are left out (RLHF_TOY_WHOLE_BOOK=false). make build has everything.
serve: $(STAMP)
	RLHF_TOY_WHOLE_BOOK=false $(PY) -m mkdocs serve --dirty --dev-addr 127.0.0.1:8000

test: $(STAMP) $(LIBS)
	MPLBACKEND=Agg $(PY) -m pytest

build: $(STAMP)
	$(PY) -m mkdocs build --strict

# The whole book as one PDF, site/rlhf-toy.pdf (the footer of every page links it): the strict site build, then
# its print page printed by headless Chromium (needs /usr/bin/chromium and fonts-noto-cjk, as the browser tests).
pdf: $(STAMP)
	$(PY) -m mkdocs build --strict
	$(PY) scripts/build_pdf.py site

notebooks: $(STAMP)
	$(PY) scripts/build_notebooks.py

figures: $(STAMP)
	$(PY) scripts/figures.py

bench: $(STAMP)
	$(PY) benchmarks/seed.py

clean:
	rm -rf site .cache .pytest_cache
