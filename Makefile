# lowbit — `make run` and `make test` work on a fresh clone with only Python 3.11+, pip and npm.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PORT   ?= 8000
CHROMIUM ?= /usr/bin/chromium
# Debian's nginx, unpacked into the venv (not installed as a service) for the proxy test.
NGINX  := $(VENV)/nginx/usr/sbin/nginx
VENDOR := static/vendor/htmx.min.js static/vendor/sse.js

.PHONY: bubblewrap kernel-check run test bench install static browser nginx lint test-gpu clean screenshots

# The C sources too: pip builds labs/quant/_kquants.c and _gptq.c into the tree (an editable install).
$(STAMP): pyproject.toml labs/quant/_kquants.c labs/quant/_gptq.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch, pinned: an open range would pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0 numpy
	$(BIN)/pip install -q -e '.[worker,dev]'
	@$(MAKE) --no-print-directory kernel-check
	@$(MAKE) --no-print-directory bubblewrap
	touch $(STAMP)

# pip skips the native kernels quietly where there is no C compiler (they are
# optional): say so loudly, with the cost and the fix (labs/quant/native.py).
kernel-check:
	@$(BIN)/python -c "from labs.quant.native import missing_kernel_warning as w; \
	  m = w(); print(f'\n*** WARNING: {m}\n' if m else 'native kernels: built')"

# The judge runs learner code under bubblewrap (and libseccomp); installed as root where missing.
bubblewrap:
	@command -v bwrap >/dev/null || { test "$$(id -u)" = 0 && echo "installing bubblewrap for the judge" && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null; } || \
	  echo "bubblewrap is missing: as root run 'apt-get install bubblewrap'; the judge refuses code until then"

install: $(STAMP)

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error

$(VENDOR): node_modules/.package-lock.json
	mkdir -p static/vendor
	cp node_modules/htmx.org/dist/htmx.min.js static/vendor/htmx.min.js
	cp node_modules/htmx-ext-sse/dist/sse.js static/vendor/sse.js

# The exercise editor: CodeMirror 6 and its Python mode, bundled by esbuild.
static/vendor/editor.js: static/src/editor.js node_modules/.package-lock.json
	mkdir -p static/vendor
	node_modules/.bin/esbuild static/src/editor.js --bundle --minify --format=iife \
	  --target=es2020 --legal-comments=none --outfile=$@

static: $(VENDOR) static/vendor/editor.js

# Browser tests drive Debian's Chromium (Playwright cannot download browsers here).
browser:
	@test -x $(CHROMIUM) || { echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

nginx: $(NGINX)

$(NGINX): | $(STAMP)
	rm -rf $(VENV)/nginx.tmp && mkdir -p $(VENV)/nginx.tmp
	cd $(VENV)/nginx.tmp && { apt-get download nginx 2>/dev/null || \
	  { apt-get update -qq && apt-get download nginx; }; }
	dpkg -x $(VENV)/nginx.tmp/nginx_*.deb $(VENV)/nginx
	rm -rf $(VENV)/nginx.tmp
	$(NGINX) -v

run: install static
	$(BIN)/lowbit migrate
	LOWBIT_PORT=$(PORT) $(BIN)/lowbit serve --embedded-worker

lint: install
	$(BIN)/ruff check app labs tests benchmarks migrations/env.py
	$(BIN)/ruff format --check app labs tests benchmarks
	$(BIN)/mypy app labs
	$(BIN)/hadolint Dockerfile

test: install static browser nginx lint
	$(BIN)/lowbit content check
	$(BIN)/pytest -m "not gpu" -q --durations=25

bench: install static
	$(BIN)/python benchmarks/run_all.py

# Every page type at 1366x900 and 390x844, under docs/screenshots/ (git ignores the PNGs).
screenshots: install static browser
	$(BIN)/python -m tests.e2e.screenshots

# Every GPU test and GPU benchmark, as one script (see docs/gpu-validation.md).
test-gpu:
	bash benchmarks/gpu.sh

clean:
	rm -rf $(VENV) node_modules static/vendor data .pytest_cache .mypy_cache .ruff_cache
