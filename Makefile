# bitnet.h: plain Make. `make` builds every example into build/ (the CLI is build/bitnet),
# `make test` builds and runs the CPU tests, `make test-gpu` runs them with a GPU required.
CC      ?= cc
CXX     ?= c++
BUILD   ?= build
OPT     ?= -O2
WARN    ?= -Wall -Wextra
CFLAGS  ?= $(OPT) -std=c11 $(WARN) $(EXTRA)
LDFLAGS ?= $(EXTRA)
LDLIBS  ?= -lm -ldl -lpthread
RUNNER  ?=
GIT_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
DEFS    := $(if $(GIT_COMMIT),-DBITNET_GIT_COMMIT=\"$(GIT_COMMIT)\")

HEADERS  := bitnet.h bitnet_cuda_kernels.h
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/%,$(wildcard examples/*.c))
TESTS    := $(patsubst tests/%.c,$(BUILD)/tests/%,$(filter-out tests/impl.c tests/fuzz_%.c,$(wildcard tests/*.c)))

.PHONY: all test test-gpu cxx-check fuzz fuzz-build clean
all: $(EXAMPLES)

$(BUILD)/%: examples/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEFS) -o $@ $< $(LDFLAGS) $(LDLIBS)

$(BUILD)/impl.o: tests/impl.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEFS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/impl.o tests/harness.h tests/rmodel.h $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/impl.o $(LDFLAGS) $(LDLIBS)

test: all $(TESTS)
	@BUILD=$(BUILD) RUNNER="$(RUNNER)" tests/run.sh $(TESTS)

# GPU tests: the same binaries, but a missing GPU is a failure instead of a skip.
test-gpu: all $(TESTS)
	@BITNET_REQUIRE_GPU=1 BUILD=$(BUILD) tests/run.sh $(TESTS)

# The header must stay valid C++ and warning-free as C11, with every compile-time option, and
# the tools (built on the GPU machine, several on the implementation's internals) must keep
# compiling with it.
OPTION_SETS := -DBITNET_STATIC -DBITNET_NO_CUDA -DBITNET_NO_SIMD -DBITNET_NO_THREADS -DBITNET_NO_MMAP -DBITNET_NO_AMX \
               "-DBITNET_MALLOC=malloc -DBITNET_FREE=free"
cxx-check:
	@mkdir -p $(BUILD)
	$(CXX) -x c++ -std=c++11 -Wall -Wextra -Werror -c -o $(BUILD)/impl_cxx.o tests/impl.c
	$(CC) -std=c11 -Wall -Wextra -Werror -c -o $(BUILD)/impl_c11.o tests/impl.c
	@for o in $(OPTION_SETS); do echo "$(CC) and $(CXX) -Werror $$o"; \
	  $(CC) -std=c11 -Wall -Wextra -Werror $$o -c -o $(BUILD)/impl_opt.o tests/impl.c || exit 1; \
	  $(CXX) -x c++ -std=c++11 -Wall -Wextra -Werror $$o -c -o $(BUILD)/impl_opt.o tests/impl.c || exit 1; done
	@for f in tools/*.c; do echo "$(CC) -fsyntax-only $$f"; $(CC) -std=c11 -Wall -Wextra -Werror -fsyntax-only $$f || exit 1; done

# libFuzzer: every tests/fuzz_NAME.c, built with clang and run FUZZ_SECONDS each, seeded from
# tests/corpus/NAME/ (read-only); new inputs go to $(BUILD)/fuzz/corpus-NAME, crashes to $(BUILD)/fuzz/.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_FLAGS   ?= -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
comma        := ,
FUZZERS      := $(patsubst tests/fuzz_%.c,$(BUILD)/fuzz/fuzz_%,$(wildcard tests/fuzz_*.c))

# The library is compiled once for all harnesses (instrumented, without libFuzzer's main).
$(BUILD)/fuzz/impl.o: tests/impl.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(subst fuzzer$(comma),fuzzer-no-link$(comma),$(FUZZ_FLAGS)) -std=c11 $(WARN) -c -o $@ $<

$(BUILD)/fuzz/fuzz_%: tests/fuzz_%.c $(BUILD)/fuzz/impl.o $(HEADERS)
	$(FUZZ_CC) $(FUZZ_FLAGS) -std=c11 $(WARN) -o $@ $< $(BUILD)/fuzz/impl.o -lm -ldl -lpthread

fuzz-build: $(FUZZERS)

# The harnesses run at the same time (each for FUZZ_SECONDS of wall time), each into its own log;
# the end of every log is printed, and any finding fails the target.
fuzz: $(FUZZERS)
	@pids=; for f in $(FUZZERS); do n=$${f##*/fuzz_}; mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "== fuzz $$n for $(FUZZ_SECONDS) s (log: $(BUILD)/fuzz/$$n.log)"; \
	  seeds=tests/corpus/$$n; [ -d $$seeds ] || seeds=; \
	  $$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
	      -artifact_prefix=$(BUILD)/fuzz/$$n- $(BUILD)/fuzz/corpus-$$n $$seeds > $(BUILD)/fuzz/$$n.log 2>&1 & \
	  pids="$$pids $$!"; done; \
	rc=0; for p in $$pids; do wait $$p || rc=1; done; \
	for f in $(FUZZERS); do n=$${f##*/fuzz_}; echo "== fuzz $$n:"; grep -E '^(==[0-9]+==|SUMMARY|Done|stat::number_of_executed_units)|Test unit written|deadly signal|ERROR: libFuzzer' $(BUILD)/fuzz/$$n.log | tail -n 20; \
	  grep -E 'cov: ' $(BUILD)/fuzz/$$n.log | tail -n 1; done; \
	[ $$rc = 0 ] || { echo "make fuzz: a harness reported a finding (see the logs above)"; exit 1; }

clean:
	rm -rf build build-*
