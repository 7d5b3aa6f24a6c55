# lpgossip — build, test, run, bench.
#
# Sources are discovered, not listed: every nn/ lowprec/ topology/ gossip/ node/
# .c file goes into build/liblpgossip.a, except node/node_main.c which is the
# `lpgossip` binary.  tests/test_*.c become cmocka programs, bench/bench_*.c
# benchmark programs, tests/fuzz/fuzz_*.c libFuzzer targets (clang only).
# Files ending in _avx2.c / _avx512bw.c / _avx512.c / _avx512bf16.c / _amx.c get the
# matching -m flags, _dotprod.c / _i8mm.c the matching -march (per file,
# never the whole build); x86 files are built only for x86 targets, ARM
# files (_neon, _dotprod, _i8mm, _arm) only for aarch64.  The code in them
# is only called through the kernel tables of the CPU's level (nn/nn_cpu.c,
# lowprec/lp_kern.c, nn/nn_kern.c).
#
#   make                 build/lpgossip, tests and benchmarks (after check-deps:
#                        missing libraries are named with their Debian packages)
#   make test            install missing packages, build, run every test
#   make run             install missing packages, build, run the default experiment
#   make bench           benchmark programs (ratios printed, no pass/fail)
#   make lint            no function over 100 lines in the library (scripts/fnlen)
#   make SANITIZE=address,undefined test   everything under ASan/UBSan (build/san/)
#   make install PREFIX=/usr/local

PREFIX   ?= /usr/local
SANITIZE ?=
CC       ?= cc

ifeq ($(SANITIZE),)
BUILD    ?= build
OPT      ?= -O2
else
BUILD    ?= build/san
OPT      ?= -O1
endif

# Build dependencies: one `pkg-config-name:debian-package` pair each.  To add
# one, append it here (and the Debian package to scripts/deps.sh's PKGS).
# cmocka is only for the test programs; every other entry goes into PKGS.
DEPS     := libczmq:libczmq-dev libzmq:libzmq3-dev yaml-0.1:libyaml-dev \
            openblas:libopenblas-dev zlib:zlib1g-dev libpng:libpng-dev \
            libjpeg:libjpeg62-turbo-dev libmicrohttpd:libmicrohttpd-dev cmocka:libcmocka-dev
PKGS     := $(filter-out cmocka,$(foreach d,$(DEPS),$(firstword $(subst :, ,$(d)))))
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
CMOCKA_CFLAGS := $(shell pkg-config --cflags cmocka 2>/dev/null)
CMOCKA_LIBS   := $(shell pkg-config --libs cmocka 2>/dev/null)

WARN     := -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Werror
CFLAGS   ?= $(OPT) $(VECT) -g
CFLAGS   += -std=c11 -D_GNU_SOURCE $(WARN) -I. $(PKG_CFLAGS) -fno-strict-aliasing
LDLIBS   += $(PKG_LIBS) -lm -lpthread
ifneq ($(SANITIZE),)
CFLAGS   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS  += -fsanitize=$(SANITIZE)
endif

MODULES  := nn lowprec topology gossip node
ALL_SRC  := $(filter-out node/node_main.c,$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
# SIMD files by target architecture ($(CC) -dumpmachine): the x86 ones only
# for x86, the ARM ones only for aarch64; any other target builds the
# portable kernels alone.
TARGET   := $(shell $(CC) -dumpmachine 2>/dev/null)
X86_PAT  := %_avx2.c %_avx512bw.c %_avx512.c %_avx512bf16.c %_amx.c %_x86.c
ARM_PAT  := %_neon.c %_dotprod.c %_i8mm.c %_arm.c
ifneq ($(filter x86_64-% i386-% i486-% i586-% i686-%,$(TARGET)),)
SIMD_OFF := $(ARM_PAT)
# x86: the vectorizer's full cost model (-O2's "very cheap" one leaves
# every loop with a remainder scalar: the elementwise layers, sums,
# copies); floats keep their order of operations (no -ffast-math), so the
# results are the same bits.  Not for aarch64, where GCC 12 fails on it
# (an internal error in the vectorizer's reductions).
VECT     := $(if $(SANITIZE),,-fvect-cost-model=dynamic)
else ifneq ($(filter aarch64-%,$(TARGET)),)
SIMD_OFF := $(X86_PAT)
else
SIMD_OFF := $(X86_PAT) $(ARM_PAT)
endif
LIB_SRC  := $(filter-out $(SIMD_OFF),$(ALL_SRC))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
LIB      := $(BUILD)/liblpgossip.a
BIN      := $(BUILD)/lpgossip
TEST_SRC := $(wildcard tests/test_*.c)
TESTS    := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_HELPER_SRC := $(filter-out $(TEST_SRC),$(wildcard tests/*.c))
TEST_HELPER_OBJ := $(TEST_HELPER_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_SRC := $(wildcard bench/bench_*.c)
BENCHES  := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)

# `make V=1` shows full command lines.
Q := $(if $(V),,@)

SIMD_AVX2   := -mavx2 -mfma
SIMD_AVX512BW := -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl
SIMD_AVX512 := $(SIMD_AVX512BW) -mavx512vnni
SIMD_BF16   := $(SIMD_AVX512) -mavx512bf16
SIMD_AMX    := $(SIMD_AVX512) -mamx-tile -mamx-int8 -mamx-bf16
SIMD_NEON    := -march=armv8-a
SIMD_DOTPROD := -march=armv8.2-a+dotprod
SIMD_I8MM    := -march=armv8.2-a+dotprod+i8mm

.PHONY: all test unit-test run bench install clean deps check-deps fuzz repro compare drill valgrind lint
# Objects of tests and benchmarks are not intermediates to delete.
.SECONDARY:
all: $(BIN) $(TESTS) $(BENCHES)

$(BUILD)/obj/%_avx2.o: %_avx2.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_AVX2) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512bw.o: %_avx512bw.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_AVX512BW) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_AVX512) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512bf16.o: %_avx512bf16.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_BF16) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_amx.o: %_amx.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_AMX) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_neon.o: %_neon.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_NEON) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_dotprod.o: %_dotprod.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_DOTPROD) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_i8mm.o: %_i8mm.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) $(SIMD_I8MM) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c | check-deps
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	$(Q)$(CC) $(CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(BIN): $(BUILD)/obj/node/node_main.o $(LIB)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

$(BUILD)/obj/tests/%.o: CFLAGS += $(CMOCKA_CFLAGS)
$(BUILD)/tests/%: $(BUILD)/obj/tests/%.o $(TEST_HELPER_OBJ) $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS) $(CMOCKA_LIBS)

$(BUILD)/bench/%: $(BUILD)/obj/bench/%.o $(LIB)
	@mkdir -p $(dir $@)
	@echo "  LD      $@"
	$(Q)$(CC) $(LDFLAGS) $^ -o $@ $(LDLIBS)

deps:
	@scripts/deps.sh

# Every compile waits for this check (an order-only prerequisite), so a
# machine without the libraries gets the list of Debian packages to install
# instead of a compiler error.  `make test` and `make run` install them first.
check-deps:
	@command -v pkg-config >/dev/null 2>&1 || { \
	  echo "lpgossip: pkg-config is not installed (Debian package pkg-config)." >&2; \
	  echo "Install the build dependencies with:  make deps   (or scripts/deps.sh; as root)" >&2; \
	  exit 1; }
	@missing=""; for d in $(DEPS); do \
	  pkg-config --exists "$${d%%:*}" || missing="$$missing $${d#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "lpgossip: missing build dependencies (Debian packages):$$missing" >&2; \
	  echo "Install them with:  make deps   (or scripts/deps.sh; as root)" >&2; \
	  echo "  or by hand:       apt-get install$$missing" >&2; \
	  exit 1; \
	fi

# Unit and integration tests; the last line printed is "N passed, N failed".
test: deps
	@$(MAKE) --no-print-directory all
	@scripts/run-tests.sh $(BUILD)

unit-test: all
	@scripts/run-tests.sh $(BUILD)

# The default experiment (see README): 8 local node processes on the ring,
# Choco-SGD, int8, topk:0.01+q8, the cnn on Fashion-MNIST, 5 epochs.
run: deps
	@$(MAKE) --no-print-directory $(BIN)
	@scripts/run-default.sh $(BIN)

bench: $(BENCHES) $(BIN)
	@for b in $(BENCHES); do echo "== $$b"; OPENBLAS_NUM_THREADS=1 $$b || exit 1; done
	@echo "== bench/bench_node_overhead.sh"; bench/bench_node_overhead.sh 60 5 $(BIN)
	@echo "== bench/bench_metrics_overhead.sh"; bench/bench_metrics_overhead.sh 150 5 $(BIN)

# The paper's Tables 3 and 4 on Fashion-MNIST, 3 seeds a cell (336 runs,
# about 12 core-hours; one run per core; resumable): results/repro.md and
# results/repro.json (scripts/repro --help; scripts/repro --dry-run lists the
# runs and estimates the time).  E.g. make repro REPRO_ARGS="--seeds 1".
repro: $(BIN)
	@scripts/repro $(REPRO_ARGS)

# Compressors (each with and without +deflate) and --gossip-every H on the
# same task (about 40 minutes on 2 cores; resumable): results/compare.md.
compare: $(BIN)
	@scripts/compare

# Fault drill: the default experiment with node 3 killed at 30% and
# restarted at 50% of training, against an undisturbed run: results/drill.md.
drill: $(BIN)
	@scripts/drill

# libFuzzer targets: clang only, bounded time each (FUZZ_SECONDS).
FUZZ_SECONDS ?= 20
fuzz: check-deps
	@scripts/fuzz.sh $(FUZZ_SECONDS)

# House style: a function fits on a screen, none over 100 lines in the
# library's modules (scripts/fnlen lists the ones that are), and a source
# file holds one job, none over 1,000 lines (tests and benches included).
lint:
	@scripts/fnlen $(MODULES)
	@awk 'FNR == 1000 + 1 { print FILENAME ": over 1000 lines"; bad = 1 } END { exit bad }' \
		$(foreach d,$(MODULES) tests bench,$(wildcard $(d)/*.c))

# Every test program under valgrind memcheck (slow: tens of minutes).
valgrind: all
	@scripts/valgrind.sh $(BUILD)

install: $(BIN)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/lpgossip/topologies \
		$(DESTDIR)$(PREFIX)/share/lpgossip/models
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/lpgossip
	install -m 644 topologies/*.yaml $(DESTDIR)$(PREFIX)/share/lpgossip/topologies/
	install -m 644 models/*.yaml $(DESTDIR)$(PREFIX)/share/lpgossip/models/

clean:
	rm -rf build

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
