# The developer entry point. Run it inside a virtualenv: `make dev` installs the package
# (editable) and the pinned tools; `make help` lists the targets. CI (.ci/run) runs `make ci`
# in a fresh virtualenv.
PYTHON ?= python
CARGO ?= cargo

# Every pip call below, including the README's test command and maturin's isolated build
# environment, resolves the pinned tool versions.
export PIP_CONSTRAINT := $(CURDIR)/constraints-dev.txt
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export CARGO_TERM_COLOR ?= never

TOOLS := maturin pytest ruff mypy coverage hypothesis ziglang auditwheel pre-commit

.PHONY: help dev tools format lint typecheck test readme-test testcov bench-quick ci release \
	release-other

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 14

dev:  ## the package (editable, with its test extra) and the pinned tools
	$(PYTHON) -m pip install -q $(TOOLS)
	$(PYTHON) -m pip install -q -e '.[test,dev]'

tools:  ## the pinned tools only (CI: the README's test command installs the package)
	$(PYTHON) -m pip install -q $(TOOLS)

format:  ## rewrite Python and Rust sources in place
	ruff check --fix .
	ruff format .
	$(CARGO) fmt --all

lint:  ## formatting checks, clippy, ruff (complexity and async rules included)
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	ruff check .
	ruff format --check .

typecheck:  ## mypy --strict (package, examples, typing tests) and stubtest of _core.pyi
	mypy --strict python/sdax_hamilton examples scripts
	mypy --strict --warn-unused-ignores tests/typing
	$(PYTHON) -m mypy.stubtest sdax_hamilton._core --allowlist stubtest-allowlist.txt

test:  ## rebuild the extension, then every test: the Rust core, then Python
	maturin develop -q
	$(CARGO) test
	$(PYTHON) -m pytest -q -p no:cacheprovider

readme-test:  ## the README's test command, verbatim (installs the package, not editable)
	bash scripts/readme_test.sh

testcov:  ## coverage: Python (coverage.py) and the Rust core (cargo-llvm-cov, if installed)
	maturin develop -q
	$(PYTHON) -m coverage erase
	$(PYTHON) -m coverage run -m pytest -q -p no:cacheprovider
	$(PYTHON) -m coverage combine -q
	$(PYTHON) -m coverage report
	@if $(CARGO) llvm-cov --version >/dev/null 2>&1; then \
	    $(CARGO) llvm-cov --package sdax-core --summary-only; \
	else \
	    echo "Rust coverage skipped: cargo-llvm-cov is not installed" \
	         "(cargo install cargo-llvm-cov && rustup component add llvm-tools-preview)"; \
	fi

bench-quick:  ## release build of the extension, then the quick benchmark (about 15 s)
	maturin develop --release -q
	$(PYTHON) bench/run.py --quick --out bench/results/quick.json

release:  ## build the wheel (manylinux2014, zig) and the sdist into dist/, and check both
	$(PYTHON) scripts/release.py --out dist

release-other:  ## also aarch64 manylinux2014 and x86_64 musllinux_1_2 wheels (built, not run)
	rustup target add aarch64-unknown-linux-gnu x86_64-unknown-linux-musl
	maturin build --release --zig --target aarch64-unknown-linux-gnu \
	    --compatibility manylinux2014 --out dist/other --quiet
	maturin build --release --zig --target x86_64-unknown-linux-musl \
	    --compatibility musllinux_1_2 --out dist/other --quiet
	auditwheel show dist/other/*_aarch64.whl
	@echo "(auditwheel cannot read the musllinux wheel on a glibc machine, and there is no"
	@echo " aarch64 or musl CPython here: these wheels are built, not installed or run)"

ci: tools lint readme-test typecheck release  ## what .ci/run runs, in a fresh virtualenv
	@echo "== make ci passed"
