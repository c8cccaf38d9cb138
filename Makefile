# The README's two commands: `make demo` and `make test`. Each does the whole set-up on a fresh
# clone: the virtual environment, the PostgreSQL server binaries (Debian package) when missing,
# Kafka's jars (Maven, inside `spectral dev up`), the local stack and the migrations; `make test`
# also installs promtool (Debian's prometheus package) for the alert rules' unit tests and Debian's
# chromium for the web console's browser tests.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
BENCH_STAMP := $(VENV)/.bench-stamp
# The quix-streams peer of `make bench` runs in a virtual environment of its own: it pins pydantic
# and confluent-kafka below what spectral uses.
PEERS_VENV  := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-stamp
SPECTRAL := $(BIN)/spectral
# The Rust toolchain: setuptools-rust builds contracts._wire, the failure-cluster record's fast
# contract check, from native/ with cargo (rustup's, in ~/.cargo/bin when the shell's PATH does not
# name it). pip would install the package without it, silently slower, so `make install` requires it.
CARGO_BIN := $(HOME)/.cargo/bin
export PATH := $(if $(wildcard $(CARGO_BIN)/cargo),$(CARGO_BIN):)$(PATH)
NATIVE_SOURCES := native/Cargo.toml native/Cargo.lock $(wildcard native/src/*.rs)
PYTEST_ARGS ?=
# The official AsyncAPI parser (npm), pinned by tests/asyncapi/package-lock.json: the suite
# validates schemas/events/asyncapi.json with it.
ASYNCAPI_DIR   := tests/asyncapi
ASYNCAPI_STAMP := $(ASYNCAPI_DIR)/node_modules/.installed-stamp
# Redocly's CLI (npm), pinned by tests/openapi/package-lock.json: the suite lints the HTTP API's
# /openapi.json with it, beside openapi-spec-validator (PyPI).
OPENAPI_DIR   := tests/openapi
OPENAPI_STAMP := $(OPENAPI_DIR)/node_modules/.installed-stamp
# axe-core (npm), pinned by tests/axe/package-lock.json: the console's browser tests run it in
# Chromium on every page.
AXE_DIR   := tests/axe
AXE_STAMP := $(AXE_DIR)/node_modules/.installed-stamp
# `make up BROKERS=3` (or demo, test): a new local stack with a 3-broker Kafka cluster; an
# existing stack keeps its size.
BROKERS ?=
DEV_UP := $(SPECTRAL) dev up $(if $(BROKERS),--brokers $(BROKERS))

# The test targets run on this checkout's own local stack (./.spectral), whatever the shell
# exported: a SPECTRAL_STATE_DIR, SPECTRAL_KAFKA_BOOTSTRAP or SPECTRAL_DATABASE_URL inherited from
# the environment (another checkout's `eval "$(spectral dev up)"`, say) would make the run share
# that stack's database and broker with whatever else uses them, and stop it at the end. Given on
# make's command line they are used: `make test SPECTRAL_STATE_DIR=DIR` (another local stack), or
# `make test SPECTRAL_KAFKA_BOOTSTRAP=HOST:PORT SPECTRAL_DATABASE_URL=URL` (existing servers).
# The other targets (up, down, demo, ...) keep following the environment, as `spectral` does.
TEST_TARGETS := test test-build test-cluster test-slow test-example
STACK_VARIABLES := SPECTRAL_STATE_DIR SPECTRAL_KAFKA_BOOTSTRAP SPECTRAL_DATABASE_URL
ifneq ($(filter all $(TEST_TARGETS),$(or $(MAKECMDGOALS),all)),)
inherited_stack := $(foreach v,$(STACK_VARIABLES),$(if $(filter environment%,$(origin $(v))),$(v)))
$(foreach v,$(filter-out SPECTRAL_STATE_DIR,$(inherited_stack)),\
	$(info make: $(v) from the environment is not used: the tests run on this checkout's stack (give it on make's command line to use it)))
ifneq ($(filter SPECTRAL_STATE_DIR,$(inherited_stack)),)
ifneq ($(abspath $(SPECTRAL_STATE_DIR)),$(CURDIR)/.spectral)
$(info make: SPECTRAL_STATE_DIR=$(SPECTRAL_STATE_DIR) from the environment is not used: the tests run on this checkout's stack, $(CURDIR)/.spectral (give it on make's command line to use it))
endif
endif
ifneq ($(filter-out SPECTRAL_STATE_DIR,$(inherited_stack)),)
unexport $(filter-out SPECTRAL_STATE_DIR,$(inherited_stack))
endif
ifneq ($(origin SPECTRAL_STATE_DIR),command line)
export SPECTRAL_STATE_DIR := $(CURDIR)/.spectral
endif
endif

.PHONY: all install bench-tools tooling helm-tools helm-binaries interop maven postgres-binaries promtool amtool chromium debian-package up down status migrate topics demo test test-cluster test-slow test-example unit lint docs docs-generate bench bench-publish soak clean test-build

all: test

# $(call debian_install,PACKAGE[,APT-OPTIONS]): install a Debian package as root, or say how to.
# On a shared machine another apt or dpkg may hold their locks (an upgrade, a sibling checkout's
# `make test`): apt-get waits for them up to APT_LOCK_TIMEOUT seconds, saying what it waits for,
# then stops with a message naming the lock and its holder. apt-get install waits for the dpkg
# lock itself (DPkg::Lock::Timeout); apt-get update does not wait for the lists lock, so it is
# tried again every few seconds until the same deadline. (apt's locks are fcntl record locks:
# a holder taken with flock(1) is not seen by apt and not waited for.)
APT_LOCK_TIMEOUT ?= 600
debian_install = if [ "$$(id -u)" != 0 ]; then \
		echo "$(1) missing: run 'sudo apt-get install -y $(1)'" >&2; exit 1; \
	fi; \
	deadline=$$(( $$(date +%s) + $(APT_LOCK_TIMEOUT) )); \
	until out=$$(apt-get update -qq 2>&1); do \
		case "$$out" in *"Could not get lock"*) ;; *) echo "$$out" >&2; exit 1 ;; esac; \
		if [ "$$(date +%s)" -ge "$$deadline" ]; then \
			echo "apt-get update waited $(APT_LOCK_TIMEOUT) s for a lock another process holds:" >&2; \
			echo "$$out" >&2; \
			echo "let it finish (or raise APT_LOCK_TIMEOUT), then run make again" >&2; exit 1; \
		fi; \
		echo "waiting for apt's lists lock: $$(echo "$$out" | grep -m1 'held by' || echo "$$out")" >&2; \
		sleep 5; \
	done; \
	holder=$$(lslocks -n -o PID,COMMAND,PATH 2>/dev/null | grep -m1 '/var/lib/dpkg/lock' | awk '{$$1 = $$1; print}' || true); \
	if [ -n "$$holder" ]; then \
		echo "waiting (at most $(APT_LOCK_TIMEOUT) s) for the dpkg lock, held by: $$holder" >&2; \
	fi; \
	if ! DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=$(APT_LOCK_TIMEOUT) \
			install -y -qq $(2) $(1) >/dev/null; then \
		echo "apt-get could not install $(1); if it could not get a lock, another process held it for more than $(APT_LOCK_TIMEOUT) s: let it finish (or raise APT_LOCK_TIMEOUT), then run make again" >&2; \
		exit 1; \
	fi

# The environment's extras: `dev`, and `bench` too when the goal needs it anyway (`make test`'s
# lint, `make bench`): one pip install then, instead of a second one that resolves everything
# again and reinstalls spectral. The stamp holds the extras installed.
BENCH_GOALS := all test test-build lint bench bench-tools
comma := ,
INSTALL_EXTRAS := $(if $(filter $(BENCH_GOALS),$(or $(MAKECMDGOALS),all)),dev$(comma)bench,dev)

$(STAMP): pyproject.toml setup.py $(NATIVE_SOURCES)
	@command -v cargo >/dev/null || { echo "cargo (Rust) is missing: install it with rustup (https://rustup.rs), then run make again" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[$(INSTALL_EXTRAS)]'
	$(BIN)/python -c 'import contracts._wire' || { echo "contracts._wire was not built (native/): see cargo's output above" >&2; exit 1; }
	echo '$(INSTALL_EXTRAS)' > $(STAMP)

install: $(STAMP)

# Benchmark-only packages: the `bench` extra (the FastStream peer, confluent-kafka; `make lint`
# installs it too, as mypy checks the peers' code) and the
# quix-streams peer's environment.
$(BENCH_STAMP): $(STAMP)
	grep -qx 'dev,bench' $(STAMP) || $(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

$(PEERS_STAMP): benchmarks/peers/quix-requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/pip install --quiet -r benchmarks/peers/quix-requirements.txt
	touch $(PEERS_STAMP)

bench-tools: $(BENCH_STAMP) $(PEERS_STAMP)

$(ASYNCAPI_STAMP): $(ASYNCAPI_DIR)/package.json $(ASYNCAPI_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is needed for the AsyncAPI check: apt-get install -y npm" >&2; exit 1; }
	cd $(ASYNCAPI_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

$(OPENAPI_STAMP): $(OPENAPI_DIR)/package.json $(OPENAPI_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is needed for the OpenAPI lint: apt-get install -y npm" >&2; exit 1; }
	cd $(OPENAPI_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

$(AXE_STAMP): $(AXE_DIR)/package.json $(AXE_DIR)/package-lock.json
	@command -v npm >/dev/null || { echo "npm is needed for the console's accessibility check: apt-get install -y npm" >&2; exit 1; }
	cd $(AXE_DIR) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	touch $@

# The Helm chart's validation (deploy/helm, tests/helm): helm and kubeconform built from the Go
# module proxy, the JSON Schemas they validate against from registries too — Kubernetes' own from
# the kubernetes-validate wheel (PyPI; read as data, not installed), the CRDs of ServiceMonitor,
# PrometheusRule and ScaledObject from the prometheus-operator and KEDA Go modules. Every version
# is pinned (the wheel by its sha256 in tests/helm/schemas.py, the modules by Go's checksum
# database), everything is cached in the ignored build/ folder. A cold build compiles helm (most
# of the time: see docs/howto/deploy/kubernetes.md); later runs reuse it.
GO_CACHE := $(CURDIR)/build/go
# Every Go build here (helm, kubeconform, the interop producer) uses the same cache and the same
# -trimpath and CGO_ENABLED=0, so the standard library is compiled once for the three (a change
# of either flag compiles it again) and no C compiler runs.
GO_ENV := GOCACHE=$(GO_CACHE)/cache GOMODCACHE=$(GO_CACHE)/mod GOFLAGS=-modcacherw GOTOOLCHAIN=local CGO_ENABLED=0
HELM_VERSION := v3.22.0
# What an official helm build stamps in (its Makefile's LDFLAGS): its version, and the Kubernetes
# version of its client-go (v0.37), which `helm template` and `helm lint` assume without a cluster.
HELM_LDFLAGS := -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37
KUBECONFORM_VERSION := v0.7.0
PROMETHEUS_OPERATOR_VERSION := v0.85.0
KEDA_VERSION := v2.21.0
KUBERNETES_VALIDATE_VERSION := 1.37.0
HELM_TOOLS := build/helm
HELM_BIN := $(HELM_TOOLS)/bin/helm-$(HELM_VERSION)
KUBECONFORM_BIN := $(HELM_TOOLS)/bin/kubeconform-$(KUBECONFORM_VERSION)
HELM_SCHEMAS := $(HELM_TOOLS)/schemas/.built-k8s-$(KUBERNETES_VALIDATE_VERSION)-po-$(PROMETHEUS_OPERATOR_VERSION)-keda-$(KEDA_VERSION)

# $(call go_tool,PACKAGE@VERSION,OUTPUT[,LDFLAGS]): build one Go command into OUTPUT.
go_tool = @command -v $(GO) >/dev/null || { echo "the Go toolchain is needed to build $(1) (https://go.dev/dl, or apt-get install golang)" >&2; exit 1; }; \
	echo "building $(1) from the Go module proxy"; \
	mkdir -p $(HELM_TOOLS)/bin && tmp=$$(mktemp -d) && \
	$(GO_ENV) GOBIN=$$tmp $(GO) install -trimpath -ldflags='-s -w $(3)' $(1) && \
	mv $$tmp/$(notdir $(firstword $(subst @, ,$(1)))) $(2) && rmdir $$tmp

$(HELM_BIN):
	$(call go_tool,helm.sh/helm/v3/cmd/helm@$(HELM_VERSION),$@,$(HELM_LDFLAGS))

$(KUBECONFORM_BIN):
	$(call go_tool,github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION),$@)

$(HELM_SCHEMAS): tests/helm/schemas.py $(STAMP)
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --dest $(HELM_TOOLS)/wheels \
		kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	$(GO_ENV) $(GO) mod download -json \
		github.com/prometheus-operator/prometheus-operator@$(PROMETHEUS_OPERATOR_VERSION) \
		github.com/kedacore/keda/v2@$(KEDA_VERSION) > $(HELM_TOOLS)/modules.json
	$(BIN)/python -m tests.helm.schemas --out $(HELM_TOOLS)/schemas \
		--wheel $(HELM_TOOLS)/wheels/kubernetes_validate-$(KUBERNETES_VALIDATE_VERSION)-py3-none-any.whl \
		--modules $(HELM_TOOLS)/modules.json
	touch $@

# The two binaries alone (pure Go, no Python environment): `make test` compiles them beside the
# other build steps and pytest.
helm-binaries: $(HELM_BIN) $(KUBECONFORM_BIN)
	ln -sf $(notdir $(HELM_BIN)) $(HELM_TOOLS)/bin/helm
	ln -sf $(notdir $(KUBECONFORM_BIN)) $(HELM_TOOLS)/bin/kubeconform

helm-tools: helm-binaries $(HELM_SCHEMAS)

# Test tooling outside Python: the AsyncAPI parser, the OpenAPI linter and the Helm chart's
# validators.
tooling: $(ASYNCAPI_STAMP) $(OPENAPI_STAMP) $(AXE_STAMP) helm-tools

# The foreign producers of tests/interop, written from the contract alone: Go (franz-go) and Java
# (kafka-clients, Jackson). Built here, before pytest and outside any test's timeout; a test only
# checks that its build is newer than its sources. Go modules come from the Go module proxy
# (pinned by go.sum) into build/go, jars and Maven's plugins from Maven Central (pinned versions
# in the pom) into build/m2: a fresh clone needs no cache of the user's.
INTEROP_GO     := build/go/interop
INTEROP_JAVA   := build/java/interop.jar
INTEROP_GO_SRC := $(wildcard tests/interop/go/*.go) tests/interop/go/go.mod tests/interop/go/go.sum
INTEROP_JAVA_SRC := tests/interop/java/pom.xml $(shell find tests/interop/java/src -name '*.java')
GO ?= $(or $(shell command -v go 2>/dev/null),$(wildcard /usr/local/go/bin/go),go)

$(INTEROP_GO): $(INTEROP_GO_SRC)
	@$(GO) version >/dev/null 2>&1 || { echo "Go $$(sed -n 's/^go //p' tests/interop/go/go.mod) or newer is needed for tests/interop/go (https://go.dev/dl; Debian's golang is older)" >&2; exit 1; }
	cd tests/interop/go && $(GO_ENV) GOFLAGS="-modcacherw -mod=readonly" $(GO) build -trimpath -o $(CURDIR)/$@ .

# Maven and a JDK: the Java producer's build, and `spectral dev up` fetches the broker's jars with
# Maven.
maven:
	@if ! command -v mvn >/dev/null 2>&1 || ! command -v javac >/dev/null 2>&1; then \
		echo "installing Debian's maven and openjdk-17-jdk-headless packages (tests/interop/java)"; \
		$(call debian_install,maven openjdk-17-jdk-headless); \
	fi

$(INTEROP_JAVA): $(INTEROP_JAVA_SRC) | maven
	mvn -B -q -Dstyle.color=never --strict-checksums -Dmaven.repo.local=$(CURDIR)/build/m2 -f tests/interop/java/pom.xml package
	touch $@

interop: $(INTEROP_GO) $(INTEROP_JAVA)

# PostgreSQL refuses to run as root; Debian's package brings the server and the `postgres` user.
postgres-binaries:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then \
		echo "installing Debian's postgresql package (server binaries)"; \
		$(call debian_install,postgresql); \
	fi

# The web console's tests drive Debian's chromium through Playwright (never a downloaded browser).
chromium:
	@if ! command -v chromium >/dev/null 2>&1; then \
		echo "installing Debian's chromium package (the console's browser tests)"; \
		$(call debian_install,chromium); \
	fi

# `make debian-package PACKAGE=NAME`: one Debian package through the same path (and lock waits) as
# the targets above; tests/integration/test_makefile_apt.py drives it with apt's locks held.
debian-package:
	@test -n "$(PACKAGE)" || { echo "usage: make debian-package PACKAGE=NAME" >&2; exit 2; }
	@$(call debian_install,$(PACKAGE),--no-install-recommends)

# promtool runs the alert rules' unit tests (deploy/prometheus/tests); only the tool is used, no
# Prometheus server is started.
promtool:
	@if ! command -v promtool >/dev/null 2>&1; then \
		echo "installing Debian's prometheus package (promtool)"; \
		$(call debian_install,prometheus,--no-install-recommends); \
	fi

# amtool checks compose's Alertmanager configuration (deploy/alertmanager); only the tool is used.
amtool:
	@if ! command -v amtool >/dev/null 2>&1; then \
		echo "installing Debian's prometheus-alertmanager package (amtool)"; \
		$(call debian_install,prometheus-alertmanager,--no-install-recommends); \
	fi

up: install postgres-binaries
	$(DEV_UP)

migrate: up
	$(SPECTRAL) db migrate

down:
	@if [ -x $(SPECTRAL) ]; then $(SPECTRAL) dev down; fi

status: install
	$(SPECTRAL) dev status

topics: up
	$(SPECTRAL) topics apply

demo: migrate
	$(SPECTRAL) demo

lint: install $(BENCH_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	cd native && cargo fmt --check && cargo clippy --release --quiet -- -D warnings

# The documentation site (mkdocs.yml), strict: a broken internal link or anchor, or a page left
# out of the navigation, fails the build. Open build/site/index.html.
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# Regenerate the reference pages generated from the code (docs/gen); a test fails when a
# committed page differs from what this would write.
docs-generate: install
	$(BIN)/python -m docs.gen

unit: install tooling
	$(BIN)/pytest tests/unit -q

# The whole suite against the real broker and database; the stack is stopped afterwards even
# when tests fail, so no process is left behind.
# The two slowest cluster fault tests (marker cluster_slow: a broker frozen for 45 s, a rolling
# restart) are left to `make test-cluster`, the other slow fault tests (marker slow: a sibling
# in `make test` holds the same guarantee) to `make test-slow`, and the example plugin's own suite
# (marker example: a second pytest run through spectral.testing) to `make test-example`, which
# keeps `make test` within its 15 minutes. `make test` still installs the example plugin and
# drives it through every ops command (tests/integration/plugins/test_example_plugin.py).
# Tests run in TEST_WORKERS processes (pytest-xdist): most of a test's time is spent waiting on
# the broker, the database or a subprocess, so four share two cores well. Tests that share a
# private cluster, broker or build directory stay in one worker (xdist_group, tests/conftest.py).
# TEST_WORKERS=0 runs them in this process, one after another.
# The build steps before pytest run side by side, TEST_BUILD_JOBS at a time (on a fresh clone they
# take minutes, waiting on the network or on one core each: Maven, npm, the Python environment,
# mypy, the docs site), and the local stack starts meanwhile; a failed step stops the stack.
# Their output comes line by line as it is written.
# The longest step, the cold compile of helm and kubeconform (minutes), runs beside all of them
# and beside pytest: only the chart's tests need it, and they wait for it (HELM_BINARIES_STATUS:
# tests/helm/conftest.py) and are scheduled after the slowest tests. Its output is in
# build/helm/binaries.log, shown when it fails; its failure fails `make test`.
TEST_WORKERS ?= 4
TEST_BUILD_JOBS ?= 4
HELM_BINARIES_STATUS := $(abspath $(HELM_TOOLS))/binaries.status
HELM_BINARIES_LOG := $(abspath $(HELM_TOOLS))/binaries.log
test:
	@mkdir -p $(HELM_TOOLS); rm -f $(HELM_BINARIES_STATUS); \
	setsid sh -c '$(MAKE) --no-print-directory helm-binaries > $(HELM_BINARIES_LOG) 2>&1; \
		echo $$? > $(HELM_BINARIES_STATUS)' & helm=$$!; \
	helm_binaries() { \
		wait $$helm; test "$$(cat $(HELM_BINARIES_STATUS) 2>/dev/null)" = 0 && return; \
		cat $(HELM_BINARIES_LOG); echo "make test: building helm and kubeconform failed" >&2; return 1; \
	}; \
	$(MAKE) --no-print-directory -j$(TEST_BUILD_JOBS) --output-sync=line test-build || { \
		kill -- -$$helm 2>/dev/null; wait $$helm; $(MAKE) --no-print-directory down; exit 1; }; \
	status=0; HELM_BINARIES_STATUS=$(HELM_BINARIES_STATUS) $(BIN)/pytest -q -p no:cacheprovider \
		--durations=15 -m "not cluster_slow and not slow and not example" \
		-n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS) || status=$$?; \
	helm_binaries || status=1; $(SPECTRAL) dev down; exit $$status

# Everything `make test` builds before pytest, and the local stack. What runs Python from the
# checkout waits for its environment to be complete (lint's bench extra reinstalls spectral), and
# the stack for Maven too (it fetches the broker's jars).
# They start longest first: the Python environment and what needs it. (helm and kubeconform are
# compiled beside them: `test` above.)
test-build: install lint docs up $(ASYNCAPI_STAMP) $(OPENAPI_STAMP) $(AXE_STAMP) $(HELM_SCHEMAS) \
	interop postgres-binaries promtool amtool chromium
ifneq ($(filter test-build,$(MAKECMDGOALS)),)
up docs $(HELM_SCHEMAS): | $(BENCH_STAMP)
up: | maven
endif

# Every test on a private 3-broker cluster (tests/cluster: producer acks, the dev and topics
# commands, broker faults under load with the stall printed), the cluster_slow ones included.
test-cluster: install postgres-binaries
	$(DEV_UP)
	@status=0; $(BIN)/pytest -q -p no:cacheprovider -m cluster --durations=10 $(PYTEST_ARGS) \
		|| status=$$?; $(SPECTRAL) dev down; exit $$status

# The slow fault tests `make test` leaves out (marker slow).
test-slow: install postgres-binaries
	$(DEV_UP)
	@status=0; $(BIN)/pytest -q -p no:cacheprovider -m slow --durations=10 $(PYTEST_ARGS) \
		|| status=$$?; $(SPECTRAL) dev down; exit $$status

# The example plugin (examples/deploy-tracker) installed beside spectral and its own tests run
# through spectral's pytest plugin, as the team that owns it would run them.
test-example: install
	$(DEV_UP)
	@status=0; $(BIN)/pytest -q -p no:cacheprovider -m example --durations=5 \
		tests/integration/plugins/test_example_plugin.py $(PYTEST_ARGS) || status=$$?; \
		$(SPECTRAL) dev down; exit $$status

bench: migrate bench-tools
	$(BIN)/python -m benchmarks

# The last `make bench` run (benchmarks/results/latest.json) becomes the one the performance page
# cites: refused unless it ran every stage on committed code and passed every check; the page is
# then generated from it.
bench-publish: install
	$(BIN)/python -m docs.gen.performance benchmarks/results/latest.json
	$(BIN)/python -m docs.gen

# The whole pipeline for five minutes with pruning on: the dedup record and the outbox level off.
soak: migrate
	$(BIN)/python -m benchmarks --stages soak

# Everything the stack created goes too, also the PostgreSQL cluster that lives outside the
# checkout (under /var/lib/spectral) when run as root.
clean:
	@if [ -x $(SPECTRAL) ]; then $(SPECTRAL) dev down --wipe; fi
	rm -rf .spectral $(VENV) $(PEERS_VENV) $(ASYNCAPI_DIR)/node_modules $(OPENAPI_DIR)/node_modules build native/target contracts/_wire*.so
