# The two commands of the README:
#   make demo   install what is needed, build, run `tq bench` on SQLite,
#               and say where the tq binary is
#   make test   install what is needed, check the formatting (format-check),
#               build with -Werror, run every test
#               (PostgreSQL ones directly and through a throwaway PgBouncer),
#               then again under AddressSanitizer + UndefinedBehaviorSanitizer
#               (through the pooler: the C suites and tpgb_*.sh only),
#               and the tests that run threads under ThreadSanitizer
JOBS ?= 2
BUILD ?= build
# make install: into $(DESTDIR)$(PREFIX) (bin/tq, lib/, include/tq.h, the
# man page), then ldconfig where the loader looks, or how a program finds
# the library elsewhere (scripts/after-install.sh); DESTDIR stages an
# install for packaging.
PREFIX ?= /usr/local
DESTDIR ?=
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan

.PHONY: all deps test-deps build demo install bench bench-quick bench-regress bench-pressure bench-fleet test test-plain test-asan test-tsan test-model fuzz format format-check clean

all: build

deps:
	@scripts/deps.sh

# A build that shows its result, not its steps: the compiler's output goes
# to DIR/build.log, printed whole only when the build fails.
quiet_build = @echo "building $(1) (log: $(1)/build.log)"; \
	cmake --build $(1) -j $(JOBS) $(2) >$(1)/build.log 2>&1 || \
	{ cat $(1)/build.log; echo "the build failed: see above, or $(1)/build.log"; exit 1; }

build: deps
	@cmake -S . -B $(BUILD) -DTQ_WERROR=ON >/dev/null
	$(call quiet_build,$(BUILD))

demo: build
	@$(BUILD)/tq bench --jobs 20000 --workers 8
	@echo
	@echo "tq is built as $(BUILD)/tq; 'make install' puts it in $(PREFIX)/bin"
	@echo "(PREFIX=DIR to choose; DESTDIR=DIR to stage)."

install: build
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix "$(PREFIX)"
	@scripts/after-install.sh "$(PREFIX)" "$(DESTDIR)"

# The benchmark harness (bench/run.sh): about 20 minutes; bench-quick: about 5.
bench: build
	@command -v gnuplot >/dev/null || apt-get install -y gnuplot-nox
	bench/run.sh $(BUILD)

# This build against an older one (REV=commit): alternated pairs, ratios.
bench-regress: build
	@[ -n "$(REV)" ] || { echo "make bench-regress REV=COMMIT (bench/regress.sh --help)"; exit 2; }
	bench/regress.sh $(REGRESS_ARGS) $(REV) $(BUILD)

# The rate under pressure (a held xmin horizon, readers) against clean runs.
bench-pressure: build
	bench/pressure.sh $(PRESSURE_ARGS) $(BUILD)

# Hundreds of workers through a throwaway PgBouncer against a few direct.
bench-fleet: build
	bench/fleet.sh $(FLEET_ARGS) $(BUILD)

bench-quick: build
	@command -v gnuplot >/dev/null || apt-get install -y gnuplot-nox
	bench/run.sh --quick $(BUILD)

test: format-check test-plain test-asan test-tsan

# What only the tests need: a browser for the dashboard's tests (tq serve),
# a connection pooler to run the PostgreSQL tests through.
test-deps:
	@scripts/deps.sh chromium fonts-dejavu-core pgbouncer

test-plain: build test-deps
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps test-deps
	@cmake -S . -B $(ASAN_BUILD) -DTQ_WERROR=ON -DTQ_SANITIZE=ON \
	      -DCMAKE_BUILD_TYPE=Debug >/dev/null
	$(call quiet_build,$(ASAN_BUILD))
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	    ctest --output-on-failure -j $(JOBS) -E '^cli_t_.*_pgb$$'

# ThreadSanitizer over the tests whose workers run callback threads (the
# worker pool shares its slots with them under a mutex) and the concurrent
# registrations, on both engines, and over tq serve (an HTTP thread pool and
# a counting thread). Command-mode workers run no threads.
TSAN_TESTS = test_store test_exchange test_postgres tq_tool record history
test-tsan: deps test-deps
	@cmake -S . -B $(TSAN_BUILD) -DTQ_WERROR=ON -DTQ_TSAN=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	$(call quiet_build,$(TSAN_BUILD),--target $(TSAN_TESTS))
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	    ctest --output-on-failure -j $(JOBS) -R '^(test_(store|exchange|postgres)|cli_t_serve)' -E '_pgb$$'

# The state machine against its model (tests/test_model.c) for many more
# seeds than `make test` runs, on both engines (a throwaway PostgreSQL
# cluster, as in the tests). MODEL_SEEDS=N MODEL_STEPS=N to change.
MODEL_SEEDS ?= 5000
MODEL_STEPS ?= 100
test-model: build
	@dir=$$(mktemp -d /tmp/tq-model.XXXXXX); chmod 755 $$dir; \
	bash tests/pg/cluster.sh start $$dir/pg >/dev/null && \
	TQ_MODEL_SEEDS=$(MODEL_SEEDS) TQ_MODEL_STEPS=$(MODEL_STEPS) $(BUILD)/tests/test_model && \
	TQ_TEST_ENGINE=postgres TQ_TEST_PG_URL="postgresql:///postgres?host=$$dir/pg&user=tq" \
	    TQ_MODEL_SEEDS=$(MODEL_SEEDS) TQ_MODEL_STEPS=$(MODEL_STEPS) $(BUILD)/tests/test_model; \
	rc=$$?; bash tests/pg/cluster.sh stop $$dir/pg; rm -rf $$dir; exit $$rc

# libFuzzer over every parser of outside input (tests/fuzz), FUZZ_SECONDS
# each, starting from the committed corpus. New inputs go to
# build-fuzz/corpus/NAME; a crash is saved in build-fuzz/ as crash-*: copy
# it into tests/fuzz/corpus/NAME/ once fixed, and `make test` replays it.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_TARGETS = url duration time name lines cron control
fuzz:
	@scripts/deps.sh clang libclang-rt-14-dev
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DTQ_FUZZ=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	@cd $(FUZZ_BUILD) && for t in $(FUZZ_TARGETS); do \
	    mkdir -p corpus/$$t && \
	    echo "fuzz_$$t: $(FUZZ_SECONDS) s" && \
	    tests/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=4096 \
	        -print_final_stats=1 corpus/$$t ../tests/fuzz/corpus/$$t 2>fuzz_$$t.log; \
	    rc=$$?; grep -E "stat::number_of_executed_units|stat::new_units_added" fuzz_$$t.log; \
	    if [ $$rc != 0 ]; then tail -40 fuzz_$$t.log; exit $$rc; fi; \
	done

FORMAT_FILES = include/*.h src/*.c src/*.h src/engine/*.c src/engine/*.h src/engine/*/*.c \
	src/engine/*/*.h src/worker/*.c src/worker/*.h tools/*.c tools/*.h tools/cmd/*.c tests/*.c tests/*.h \
	tests/fuzz/*.c tests/fuzz/*.h examples/*.c bench/*.c
format: deps
	clang-format -i $(FORMAT_FILES)

# Part of make test: fails, naming the places, when `make format` would
# change a file.
format-check: deps
	clang-format --dry-run -Werror $(FORMAT_FILES)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
