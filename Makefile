# The two commands: `make demo` and `make test`. Both install what they need.
#
# One persistent target directory outside the clone, so librocksdb (about 12
# minutes from scratch on 2 cores) is built once per machine. Never clean it.
SHELL := /bin/bash
export CARGO_TARGET_DIR ?= $(HOME)/.cache/subagents-target
CARGO ?= cargo
DATA ?= ./subagents-data
# The release build used by `make bench` has its own librocksdb build.
BENCH_ARGS ?=
# Never wrap cargo in `timeout`: killing a librocksdb build midway throws away
# the build-script run, and the next build starts the 12 minutes over.

FUZZ_TARGETS := record_decode event_json checkpoint_decode schema_subset persona_template decide_sequence
# Seconds per fuzz target for `make fuzz`.
FUZZ_SECONDS ?= 60
# Fuzz builds use their own flags, so their own target directory.
FUZZ_TARGET_DIR ?= $(HOME)/.cache/subagents-fuzz-target
# Rounds of the SIGKILL crash harness, and model-test sequences, for `make soak`.
SOAK_ROUNDS ?= 100
SOAK_MODEL_CASES ?= 4096
# One-character chunks an ACP agent floods a turn with, and PostgreSQL
# crashes under `serve`, for `make soak` (make test: 100,000 and 1).
SOAK_FLOOD_CHUNKS ?= 1000000
SOAK_OUTAGE_ROUNDS ?= 10
# Byte flips per file of the corruption attack for `make soak` (make test: 12).
SOAK_CORRUPTION_FLIPS ?= 200

.PHONY: deps own-target-dir own-fuzz-target-dir demo test lint unit docs package install install-check bench fuzz soak api-fuzz prune-binaries

# Cargo names a workspace's own crates' artifacts by their paths inside the
# workspace, not by where the checkout is, so two checkouts (a clone, a git
# worktree) that build into one target directory replace each other's
# artifacts, and a source file older than the other checkout's artifact is
# taken as built: the next build links the other checkout's code. When the
# last build into a directory through make was another checkout's, this
# one's files are touched first, so cargo rebuilds its own crates (a few
# minutes; the dependencies, librocksdb among them, are kept). A git
# checkout touches the files git tracks; any other folder, every file but
# its .git, target, subagents-data and the target directory. Each target
# directory remembers its own last checkout: CARGO_TARGET_DIR
# (own-target-dir) and FUZZ_TARGET_DIR (own-fuzz-target-dir).
define guard_target_dir
	@t="$(1)"; d="$(CURDIR)"; mkdir -p "$$t"; \
	last="$$(cat "$$t/.checkout" 2>/dev/null)"; \
	if [ "$$last" != "$$d" ]; then \
		if [ -n "$$last" ]; then \
			echo "$$t was last built from $$last: touching this checkout's files so cargo rebuilds its crates"; \
		else \
			echo "$$t names no checkout yet: touching this checkout's files so cargo builds its own crates"; \
		fi; \
		if [ "$$(git -C "$$d" rev-parse --show-toplevel 2>/dev/null)" = "$$d" ]; then \
			git -C "$$d" ls-files -z | (cd "$$d" && xargs -0 -r touch -c); \
		else \
			find "$$d" \( -path "$$d/.git" -o -path "$$t" -o -path "$$d/target" -o -path "$$d/subagents-data" \) -prune \
				-o -type f -print0 | xargs -0 -r touch -c; \
		fi; \
		printf '%s\n' "$$d" > "$$t/.checkout"; \
	fi
endef

own-target-dir:
	$(call guard_target_dir,$(CARGO_TARGET_DIR))

own-fuzz-target-dir:
	$(call guard_target_dir,$(FUZZ_TARGET_DIR))

# System packages: libclang for the RocksDB bindings, a C++ compiler for
# librocksdb, curl and jq for the README's gateway session (a test runs it),
# chromium and chromium-driver for the console's browser tests, postgresql
# for the PostgreSQL log's tests (each run starts its own server: initdb in
# a temporary directory, a private port, run as the `postgres` user).
deps: own-target-dir
	@command -v $(CARGO) >/dev/null || { echo "cargo is required (rustup)"; exit 1; }
	@if ! dpkg -s libclang-dev >/dev/null 2>&1 || ! command -v c++ >/dev/null \
		|| ! command -v curl >/dev/null || ! command -v jq >/dev/null \
		|| ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
		echo "installing libclang-dev, a C++ compiler, curl and jq (the README's gateway session), chromium and chromium-driver (the console's browser tests)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev g++ curl jq chromium chromium-driver >/dev/null; \
	fi
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "installing postgresql (the PostgreSQL log's tests start a server of their own)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi

# The binaries `make demo` runs (cargo's host-tuple target directory, see
# .cargo/config.toml).
HOST_TUPLE = $(shell rustc -vV | sed -n 's/^host: //p')
BIN_DIR = $(CARGO_TARGET_DIR)/$(HOST_TUPLE)/debug
# The demo's spawned children run on the deterministic ACP test agent over
# real stdio (`subagents demo --acp "CMD ARGS"`; any ACP agent works).
DEMO_ACP ?= $(BIN_DIR)/subagents-acp-test-agent --script $(CURDIR)/cli/src/demo/acp-script.json

# Built for the whole workspace, so the build shares librocksdb with
# `make test` (a `-p` build resolves features differently and builds it again).
demo: deps
	$(CARGO) build -q --workspace --bins
	$(BIN_DIR)/subagents demo --data $(DATA) --acp "$(DEMO_ACP)"

lint: deps
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Each linked test binary links all of librocksdb (about 18 GB for the
# whole set, librocksdb built without debug info: Cargo.toml); a clone in
# another folder links over the same names (own-target-dir). When
# less than 50 GB is free, the linked executables of earlier builds (tests
# and examples) and the incremental caches are removed first: cargo links
# them again; the compiled crates and librocksdb stay. `make test` does this
# before its first step, since even `cargo doc` fails on a full disk.
PRUNE_BELOW_KB ?= 52428800
prune-binaries:
	@mkdir -p $(CARGO_TARGET_DIR)
	@if [ "$$(df --output=avail -k $(CARGO_TARGET_DIR) | tail -1)" -lt $(PRUNE_BELOW_KB) ] && [ -d $(BIN_DIR)/deps ]; then \
		echo "less than 50 GB free: removing the linked test binaries and incremental caches of earlier builds"; \
		find $(BIN_DIR)/deps $(BIN_DIR)/examples -maxdepth 1 -type f -perm -u+x ! -name '*.*' -delete 2>/dev/null; \
		rm -rf $(BIN_DIR)/incremental; \
	fi

# Runs every test, then prints one closing line that totals all test binaries.
unit: deps prune-binaries
	@mkdir -p $(CARGO_TARGET_DIR)
	set -o pipefail; $(CARGO) test --workspace --no-fail-fast 2>&1 | tee $(CARGO_TARGET_DIR)/test-output.txt
	@awk '/^test result: (ok|FAILED)\./ {passed += $$4; failed += $$6} END {printf "total: %d passed, %d failed\n", passed, failed}' $(CARGO_TARGET_DIR)/test-output.txt

# The API docs with warnings as errors (a broken intra-doc link fails),
# then each library crate packaged as it would be published.
docs: deps
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -q --workspace --no-deps

# `cargo package` for every library crate, without the verify build (it
# would build librocksdb again in a scratch directory): the manifest, the
# file list and the path dependencies' versions are checked. The crates
# are packaged together, so each finds the others it depends on.
LIBRARY_CRATES := subagent-core subagent-store subagent-projections subagent-runtime subagent-replay subagent-gateway subagent-acp subagent-pg
# Any warning (a missing description, license, repository, ...) fails.
package: deps
	@$(CARGO) package --no-verify --allow-dirty $(addprefix -p ,$(LIBRARY_CRATES)) \
		> $(CARGO_TARGET_DIR)/package-output.txt 2>&1; status=$$?; \
		if [ $$status -ne 0 ] || grep -E '^(warning|error)' $(CARGO_TARGET_DIR)/package-output.txt; then \
			cat $(CARGO_TARGET_DIR)/package-output.txt; exit 1; fi; \
		echo "packaged: $(LIBRARY_CRATES)"

# `make install` puts `subagents` on the PATH: PREFIX/bin (default
# ~/.cargo/bin, where rustup puts cargo, so it is already on the PATH), its
# bash, zsh and fish completions under PREFIX/share, and its man page in
# PREFIX/share/man/man1. The binary is the workspace's release build, the
# one `make bench` uses: `cargo install --path cli` would resolve features
# for the CLI alone and build librocksdb yet again. PROFILE=debug installs
# the debug build instead (what `make test` checks, without a release build).
PREFIX ?= $(HOME)/.cargo
PROFILE ?= release
install: deps
	$(CARGO) build -q --locked --workspace --bins $(if $(filter release,$(PROFILE)),--release,)
	install -D -m 755 $(CARGO_TARGET_DIR)/$(HOST_TUPLE)/$(PROFILE)/subagents $(PREFIX)/bin/subagents
	mkdir -p $(PREFIX)/share/bash-completion/completions $(PREFIX)/share/zsh/site-functions \
		$(PREFIX)/share/fish/vendor_completions.d $(PREFIX)/share/man/man1
	$(PREFIX)/bin/subagents completions bash > $(PREFIX)/share/bash-completion/completions/subagents
	$(PREFIX)/bin/subagents completions zsh > $(PREFIX)/share/zsh/site-functions/_subagents
	$(PREFIX)/bin/subagents completions fish > $(PREFIX)/share/fish/vendor_completions.d/subagents.fish
	$(PREFIX)/bin/subagents manpage > $(PREFIX)/share/man/man1/subagents.1
	@echo "installed $(PREFIX)/bin/subagents; $$(command -v subagents >/dev/null && echo 'it is on your PATH' || echo 'add $(PREFIX)/bin to your PATH')"

# `make install` into a scratch prefix with the debug build, then the
# installed files are used as a user would: the binary from the PATH, the
# man page rendered, bash completing a subcommand.
install-check: deps
	@scratch=$$(mktemp -d) && trap 'rm -rf "$$scratch"' EXIT && \
	$(MAKE) -s install PREFIX=$$scratch PROFILE=debug >/dev/null && \
	PATH=$$scratch/bin:$$PATH scripts/install-check.sh $$scratch

test: prune-binaries lint docs package unit install-check

bench: deps
	$(CARGO) build -q --release --workspace --bins
	for part in append activations messages replay list startup memory gateway console acp delegation; do \
		$(CARGO_TARGET_DIR)/$(HOST_TUPLE)/release/subagents-bench $$part $(BENCH_ARGS) || exit 1; \
	done

# Each cargo-fuzz target for FUZZ_SECONDS, growing the committed corpora
# (fuzz/corpus/<target>); `make test` replays them. `-s none` runs without a
# sanitizer, which works on the stable toolchain (see TESTING.md).
fuzz: deps own-fuzz-target-dir
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	for target in $(FUZZ_TARGETS); do \
		CARGO_TARGET_DIR=$(FUZZ_TARGET_DIR) $(CARGO) fuzz run -s none $$target fuzz/corpus/$$target -- \
			-max_total_time=$(FUZZ_SECONDS) -max_len=4096 -print_final_stats=1 || exit 1; \
	done

# Long runs of what `make test` runs briefly: the corruption attack with
# SOAK_CORRUPTION_FLIPS flips per file, the runtime crash harness for
# SOAK_ROUNDS SIGKILL rounds, and the model-based test for SOAK_MODEL_CASES
# sequences over memory (a fifth of that over RocksDB). Built for the whole
# workspace, as `make test` is, so the runs share its librocksdb (a `-p`
# build resolves features for one package and builds librocksdb again, 12
# minutes); `--test crash` also runs the store's own crash test, which takes
# no rounds variable.
soak: deps
	SUBAGENTS_CORRUPTION_FLIPS=$(SOAK_CORRUPTION_FLIPS) $(CARGO) test --workspace --test corruption -- --nocapture
	SUBAGENTS_CRASH_ROUNDS=$(SOAK_ROUNDS) $(CARGO) test --workspace --test crash -- --nocapture
	SUBAGENTS_MODEL_CASES=$(SOAK_MODEL_CASES) $(CARGO) test --workspace --test model -- --nocapture
	SUBAGENTS_FLOOD_CHUNKS=$(SOAK_FLOOD_CHUNKS) $(CARGO) test --workspace --test output -- --nocapture flood
	SUBAGENTS_OUTAGE_ROUNDS=$(SOAK_OUTAGE_ROUNDS) $(CARGO) test --workspace --test postgres -- --nocapture serve_refuses_503

# schemathesis (from PyPI, installed here when missing) against a live
# `subagents serve` on 127.0.0.1, generating requests from the served OpenAPI
# document: any 5xx or any answer outside the document fails. API_FUZZ_EXAMPLES
# requests per operation.
API_FUZZ_EXAMPLES ?= 100
api-fuzz: deps
	@command -v schemathesis >/dev/null || pip install --quiet schemathesis
	$(CARGO) build -q --workspace --bins
	scripts/api-fuzz.sh "$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/$$(rustc -vV | sed -n 's/host: //p')/debug/subagents" $(API_FUZZ_EXAMPLES)

