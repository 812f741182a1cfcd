# Entry points. Each target installs what it needs (scripts/install-deps is
# idempotent), configures with CMake and builds; ctest runs the tests.
#   make demo   build, then save / verify / describe a synthetic dataset, write
#               its virtual BF and mean pattern as PNG, print the qem view command
#   make test   every test: release, install, the Python package, each decode
#               path, golden under valgrind, ASan + UBSan, TSan, fuzz smoke
#   make bench  the benchmark (writes doc/benchmarks.md); make bench-python the package's
#   make bench-scale  the 512 set (19.3 GB .npy, generated once into SCALE_DIR
#               and kept) as .qem and pack beside a C loop over the mapped .npy,
#               then written by qem save, qem pack produce and HDF5 on 2 threads
#   make bench-record  live recording: detector streams replayed over loopback
#               into qem record, beside qem save of the same frames
#   make profile  instruction counts of the main paths (callgrind)
#   make fuzz   every libFuzzer target for FUZZ_SECONDS each (clang)

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD ?= build
ASAN_BUILD ?= build-asan
DEMO ?= demo
FUZZ_BUILD ?= build-fuzz
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 300
FUZZ_SMOKE_SECONDS ?= 20

.PHONY: all deps build demo test test-release test-install test-python python-venv bench-python bench-distributed bench-scale bench-record test-paths test-asan test-tsan test-valgrind test-fuzz fuzz fuzz-build bench profile clean

all: build

deps:
	./scripts/install-deps

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQEM_WERROR=OFF
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	@rm -rf $(DEMO) && mkdir -p $(DEMO)
	@echo "== generating a synthetic 4D-STEM acquisition (32x32 scans, 64x64 detector, uint16)"
	$(BUILD)/bench/qem-synth $(DEMO)/synthetic.npy --shape 32,32,64,64 --dose 20
	@echo "== saving it losslessly as .qem"
	$(BUILD)/qem save $(DEMO)/synthetic.npy $(DEMO)/synthetic.qem
	@echo "== verifying every checksum, stream and spatial sum"
	$(BUILD)/qem verify $(DEMO)/synthetic.qem
	@echo "== exporting and comparing with the source, byte for byte"
	$(BUILD)/qem export --quiet $(DEMO)/synthetic.qem $(DEMO)/roundtrip.npy
	cmp $(DEMO)/synthetic.npy $(DEMO)/roundtrip.npy && echo "identical"
	@echo "== summary"
	$(BUILD)/qem info $(DEMO)/synthetic.qem
	@ls -l $(DEMO)/synthetic.npy $(DEMO)/synthetic.qem | awk '{print $$5, $$9}'
	@echo "== a virtual bright-field image and the mean pattern, as PNG"
	$(BUILD)/qem virtual $(DEMO)/synthetic.qem --detector bf -o $(DEMO)/virtual-bf.png
	$(BUILD)/qem mean $(DEMO)/synthetic.qem -o $(DEMO)/mean.png
	@echo "== to explore it in the browser (live virtual detector; Ctrl-C stops):"
	@echo "   $(BUILD)/qem view $(DEMO)/synthetic.qem"

test: deps test-release test-install test-python test-paths test-valgrind test-asan test-tsan test-fuzz

test-release:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQEM_WERROR=ON
	cmake --build $(BUILD) -j $(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# A fresh install into a temporary prefix; the README's C example built
# against it through pkg-config and find_package(qem), run on a fixture.
test-install: test-release
	sh tests/install/test_install.sh $(BUILD) /usr/bin/python3

# The Python package as a user installs it: a fresh venv that sees
# Debian's packages, made by README.md's own two lines (offline; the
# extension comes from this CMake build, kept in $(BUILD)/python-ext
# between runs), then its pytest suite against the installed copy.
VENV ?= $(BUILD)/venv
python-venv:
	QEM_CMAKE_BUILD_DIR=$(abspath $(BUILD))/python-ext sh tests/package/readme_venv.sh $(abspath $(VENV))

test-python: test-release python-venv
	cd tests/package && QEM_CLI=$(abspath $(BUILD))/qem \
		$(abspath $(VENV))/bin/python -m pytest -q -p no:cacheprovider .

# The unit and golden tests once more on each decode path the CPU has
# (the default run took the one AUTO picks); a path it lacks is skipped,
# saying so. The scalar decode pass also encodes on the scalar path.
DECODE_PATHS = scalar avx2 avx512 avx2-loads
test-paths: test-release
	@for p in $(DECODE_PATHS); do \
		if $(BUILD)/tests/decode_paths $$p; then \
			enc=auto; [ $$p = scalar ] && enc=scalar; \
			echo "== unit and golden tests on the $$p decode path (QEM_RANS_PATH=$$p, QEM_ENCODE_PATH=$$enc)"; \
			(cd $(BUILD) && QEM_RANS_PATH=$$p QEM_ENCODE_PATH=$$enc ctest --output-on-failure -j $(JOBS) -L 'unit|golden') || exit 1; \
		else \
			echo "== skipped the $$p decode path: this CPU cannot run it"; \
		fi; \
	done

# The golden tests under valgrind memcheck (release build): zero errors,
# no definite leaks. (OpenMP's thread stacks show as "possibly lost".)
VALGRIND_TESTS = golden_qem_fixtures golden_pack_fixtures golden_products_fixtures
test-valgrind: test-release
	@for t in $(VALGRIND_TESTS); do \
		echo "valgrind memcheck: $$t"; \
		valgrind -q --error-exitcode=99 --leak-check=full --show-possibly-lost=no \
			--errors-for-leak-kinds=definite $(BUILD)/tests/$$t || exit 1; \
	done

test-asan:
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DQEM_SANITIZE=ON -DQEM_WERROR=ON
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j $(JOBS)

# Callers' threads sharing one handle, and a recording's receiver and
# writer threads (the Merlin stream: the DECTRIS one runs inside libzmq's
# threads, which are not instrumented), under ThreadSanitizer. The library
# runs its own work on one thread here (OMP_NUM_THREADS=1): GCC's OpenMP
# runtime is not instrumented, and the tests are about the shared state.
test-tsan:
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DQEM_TSAN=ON -DQEM_WERROR=ON
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target unit_concurrency unit_products \
		unit_qem_detector_image unit_container_load unit_column_cache unit_packed_copy qem
	cd $(TSAN_BUILD) && OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
		ctest --output-on-failure \
		-R '^(unit_concurrency|unit_products|unit_qem_detector_image|unit_container_load|unit_column_cache|unit_packed_copy|cli_record_merlin)$$'

# libFuzzer targets, built with clang under ASan + UBSan (tests/fuzz).
fuzz-build:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DQEM_FUZZ=ON -DQEM_BUILD_TESTS=OFF -DQEM_WERROR=ON \
		-DQEM_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

test-fuzz: fuzz-build
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

fuzz: deps fuzz-build
	./tests/fuzz/run.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

bench: build
	$(BUILD)/bench/qem-bench --markdown doc/benchmarks.md

# qem.dask on a LocalCluster: 1 against 2 workers, and against the C path.
bench-distributed: build python-venv
	$(VENV)/bin/python bench/bench_distributed.py --qem $(BUILD)/qem \
		--synth $(BUILD)/bench/qem-synth --sets A,B --markdown doc/benchmarks.md

# The Python package beside the C path, h5py, numpy and Dask.
bench-python: build python-venv
	$(VENV)/bin/python bench/bench_python.py --qem $(BUILD)/qem --synth $(BUILD)/bench/qem-synth \
		--libqem $(BUILD)/libqem.so --markdown doc/benchmarks.md

# At scale (issue 29): the 512 set generated once into $(SCALE_DIR) (kept,
# reused), then qem view, the pack load and the Python package measured on
# it with warm page cache, beside a plain C loop over the mapped .npy.
# SCALE_SHAPE=64,64,64,64 SCALE_DIR=/tmp/x runs the same on a small set;
# SCALE_ARGS="--only save" only the rows that write the set (issue 31),
# printed.
SCALE_DIR ?= /var/tmp/qem-scale
SCALE_SHAPE ?= 512,512,192,192
SCALE_RUNS ?= 3
SCALE_MARKDOWN ?= doc/benchmarks.md
SCALE_ARGS ?=
bench-scale: build python-venv
	$(VENV)/bin/python bench/bench_scale.py --viewer $(BUILD)/bench/qem-bench-viewer \
		--qem $(BUILD)/qem --workdir $(SCALE_DIR) --shape $(SCALE_SHAPE) --runs $(SCALE_RUNS) \
		--markdown $(SCALE_MARKDOWN) $(SCALE_ARGS) \
		--command "make bench-scale SCALE_DIR=$(SCALE_DIR) SCALE_SHAPE=$(SCALE_SHAPE) SCALE_RUNS=$(SCALE_RUNS)"

# Live recording (issue 32): synthetic Merlin and DECTRIS streams replayed
# over loopback into qem record, beside qem save of the same frames.
RECORD_DIR ?= /var/tmp/qem-record
bench-record: build
	/usr/bin/python3 bench/bench_record.py --qem $(BUILD)/qem --workdir $(RECORD_DIR) \
		--markdown doc/benchmarks.md

profile: build
	bench/callgrind.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD) $(DEMO)
