# Two commands on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-serial lint bench bench-kube bench-kube-large docs clean docs-assets traces kube-bin evaluation kueue-bin volcano-bin fidelity fidelity-volcano fidelity-slurm

# `make run` installs only what the server needs; `make test` adds the test, plot and
# evaluation extras. pip shows its progress (a first install takes a minute or two).
RUN_STAMP := $(VENV)/.installed-run

$(RUN_STAMP): pyproject.toml
	@test -d $(VENV) || { echo "creating $(VENV)"; $(PY) -m venv $(VENV); }
	@echo "installing gpuq and what the server needs into $(VENV)"
	$(BIN)/pip install --progress-bar on --upgrade pip
	$(BIN)/pip install --progress-bar on -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	@echo "installing the test, plot and evaluation extras into $(VENV)"
	$(BIN)/pip install --progress-bar on -e '.[dev,plots,eval]'
	touch $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/gpuq serve

# two pytest-xdist workers, a test file to each (most tests wait on PostgreSQL, a server or
# a control plane), with every real-control-plane file on one worker, so one control plane
# runs at a time (tests/conftest.py); about half the one-process time on 2 cores
test: $(STAMP)
	$(BIN)/pytest -n 2 --dist loadfile

# the same tests in one process (a failure's output in collection order)
test-serial: $(STAMP)
	$(BIN)/pytest

lint: $(STAMP)
	$(BIN)/ruff check app tests bench
	$(BIN)/lint-imports
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/core.py

# Pods/s bound by kube-scheduler and by gpuq on a real control plane (docs/benchmarks.md);
# needs `make kube-bin` and TEST_DATABASE_URL
bench-kube: $(STAMP)
	nice -n 10 $(BIN)/python -m bench.throughput_kube --nodes 250 --pods 2000 --gangs 100

# The size the throughput goal is stated for (docs/benchmarks.md): 1,000 kwok nodes of 16
# GPUs, a backlog of 10,000 single-Pod jobs for kube-scheduler and gpuq, then 500 8-Pod gangs
# for gpuq; two rounds of kube-scheduler and two gpuq phases (--bind-workers 16,32
# --rounds 2) took 31 min on 2 cores, this target (one round, one gpuq phase) less.
# LARGE_NODES=5000 LARGE_PODS=50000 for the bigger one.
LARGE_NODES ?= 1000
LARGE_PODS ?= 10000
LARGE_GANGS ?= 500
bench-kube-large: $(STAMP)
	nice -n 10 $(BIN)/python -m bench.throughput_kube --nodes $(LARGE_NODES) --gpus-per-node 16 \
		--pods $(LARGE_PODS) --gangs $(LARGE_GANGS)

# Regenerate docs/configuration.md and docs/api.md from the code (tests/unit/test_docs.py
# fails when they are stale).
docs: $(STAMP)
	$(BIN)/python -m app.docgen

# The public traces of the evaluation (eval/traces/README.md): downloaded from their
# upstream repositories at pinned commits, or copied with TRACES_FROM=DIR; SHA-256 checked.
traces:
	$(PY) -m app.simulate.trace_fetch $(if $(TRACES_FROM),--from $(TRACES_FROM))

# The evaluation (docs/evaluation.md): each baseline's settings chosen on the tuning windows,
# then every policy on the evaluation windows (eval/windows/, from eval/windows.yaml); needs
# `make traces`; about 45 CPU minutes (the LP bounds: 0.5-5 min a window)
evaluation: $(STAMP)
	nice -n 10 $(BIN)/python -m app.simulate.suite --tune eval/windows/tuning/*.yaml \
		--evaluate eval/windows/evaluation/*.yaml --out docs/eval/windows

# The real control plane of tests/realkube (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kwok) built from source at the versions pinned in tools/kube/*/go.mod
# (needs Go and the Go module proxy; docs/testing.md). The tests find them here or in
# $KUBEBUILDER_ASSETS.
KUBE_BIN ?= .kube-bin
kube-bin: $(KUBE_BIN)/VERSIONS
$(KUBE_BIN)/VERSIONS: tools/kube/build.sh $(wildcard tools/kube/*/go.mod tools/kube/*/go.sum)
	tools/kube/build.sh $(KUBE_BIN)

# The real Kueue the baseline-fidelity harness runs (bench/realsched.py), built from the
# module at the version pinned in tools/kueue/go.mod, with its CRDs; git-ignored.
KUEUE_BIN ?= .kueue-bin
kueue-bin: $(KUEUE_BIN)/VERSIONS
$(KUEUE_BIN)/VERSIONS: tools/kueue/build.sh tools/kueue/go.mod tools/kueue/go.sum
	tools/kueue/build.sh $(KUEUE_BIN)

# Baseline fidelity (docs/evaluation.md): each scenario of eval/fidelity on real Kueue
# (its defaults, then the setting the evaluation's tuning chose), on kube-scheduler's
# default profile and on gpuq's own backend, each compared with its model (fifo-typed for
# kube-scheduler); about 2 min per scenario and system on 2 cores. Needs
# `make kube-bin kueue-bin` and, for gpuq, TEST_DATABASE_URL.
FIDELITY_OUT ?= reports/fidelity
KUEUE_TUNED ?= flavor_order=fastest,nominal=cohort,cover_cpu_memory=true
fidelity: $(STAMP)
	GPUQ_KUEUE_BIN=$(KUEUE_BIN) nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml \
		--system kueue --speedup 20 --tolerance 100 --compare --out $(FIDELITY_OUT)
	GPUQ_KUEUE_BIN=$(KUEUE_BIN) nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml \
		--system kueue --kueue-settings $(KUEUE_TUNED) --speedup 20 --tolerance 100 \
		--compare --out $(FIDELITY_OUT)/tuned
	nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml \
		--system kube-scheduler --speedup 20 --tolerance 100 --compare --out $(FIDELITY_OUT)
	nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml \
		--system gpuq --speedup 20 --tolerance 100 --compare --out $(FIDELITY_OUT)

# The real Volcano (scheduler and controller manager) of the same harness. The Go module
# proxy refuses volcano.sh/volcano, so it is built from a source checkout of
# github.com/volcano-sh/volcano: make volcano-bin VOLCANO_SRC=DIR; git-ignored.
VOLCANO_BIN ?= .volcano-bin
volcano-bin:
	@test -n "$(VOLCANO_SRC)" || { echo "set VOLCANO_SRC to a checkout of github.com/volcano-sh/volcano (the Go module proxy refuses the module)"; exit 2; }
	tools/volcano/build.sh $(VOLCANO_SRC) $(VOLCANO_BIN)

# Volcano fidelity (docs/evaluation.md): every eval/fidelity scenario on real Volcano, the
# chart's configuration and the setting the tuning chose, compared with the volcano model.
VOLCANO_TUNED ?= overcommit_factor=None
fidelity-volcano: $(STAMP)
	GPUQ_VOLCANO_BIN=$(VOLCANO_BIN) nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml eval/fidelity/volcano/*.yaml \
		--system volcano --speedup 20 --tolerance 100 --compare --out $(FIDELITY_OUT)
	GPUQ_VOLCANO_BIN=$(VOLCANO_BIN) nice -n 10 $(BIN)/python -m bench.realsched eval/fidelity/*.yaml eval/fidelity/volcano/*.yaml \
		--system volcano --volcano-settings $(VOLCANO_TUNED) --speedup 20 --tolerance 100 \
		--compare --out $(FIDELITY_OUT)/tuned

# Slurm fidelity (docs/evaluation.md): real Slurm 22.05 on this machine (as root, after
# apt-get install -y slurmctld slurmd slurm-client slurmdbd munge mariadb-server) on every
# eval/fidelity scenario and eval/fidelity/slurm, compared with the slurm model; 5-9 min wall
# per scenario at 5x (mostly sleeping), about 50 min in all.
fidelity-slurm: $(STAMP)
	nice -n 10 $(BIN)/python -m bench.realslurm eval/fidelity/*.yaml eval/fidelity/slurm/*.yaml \
		--speedup 5 --compare --out $(FIDELITY_OUT)

clean:
	rm -rf $(VENV) .gpuq

# Swagger UI and ReDoc for the off-line /docs and /redoc, and uPlot for the dashboard's
# charts, vendored from the npm registry
SWAGGER_UI ?= 5.35.0
REDOC ?= 2.5.1
UPLOT ?= 1.6.32
VENDOR := app/ui/static/vendor
docs-assets:
	rm -rf .vendor-tmp && mkdir -p .vendor-tmp $(VENDOR)/swagger-ui $(VENDOR)/redoc $(VENDOR)/uplot
	cd .vendor-tmp && npm pack -q swagger-ui-dist@$(SWAGGER_UI) redoc@$(REDOC) uplot@$(UPLOT) \
		&& mkdir s r u && tar xzf swagger-ui-dist-$(SWAGGER_UI).tgz -C s && tar xzf redoc-$(REDOC).tgz -C r \
		&& tar xzf uplot-$(UPLOT).tgz -C u
	cp .vendor-tmp/s/package/swagger-ui-bundle.js .vendor-tmp/s/package/swagger-ui.css \
		.vendor-tmp/s/package/favicon-32x32.png .vendor-tmp/s/package/LICENSE \
		.vendor-tmp/s/package/NOTICE $(VENDOR)/swagger-ui/
	cp .vendor-tmp/r/package/bundles/redoc.standalone.js .vendor-tmp/r/package/LICENSE $(VENDOR)/redoc/
	cp .vendor-tmp/u/package/dist/uPlot.iife.min.js .vendor-tmp/u/package/dist/uPlot.min.css \
		.vendor-tmp/u/package/LICENSE $(VENDOR)/uplot/
	cd $(VENDOR) && sha256sum swagger-ui/* redoc/* uplot/* > SHA256SUMS
	rm -rf .vendor-tmp
