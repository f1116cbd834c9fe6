# LMDBStore — developer entry points. `make test` is what CI runs.
.PHONY: test bench deps sanitize fuzz

test: deps
	swift test

# The main job: lmdbstore-bench on the default 1 000 000-object dataset (generated on first run, then reused from
# .bench-data/), LMDBStore side by side with SQLite (GRDB) and raw LMDB.
bench: deps
	swift run -c release --package-path Benchmarks lmdbstore-bench run --objects 1m --data .bench-data

# The suite under ThreadSanitizer, then under AddressSanitizer, each in its own build folder (Docs/TESTING.md).
# Swift's backtracer is off: it hangs on a sanitized process that stops, and the sanitizer prints the stack itself.
# Leak checks are off: the toolchain's runtime and Foundation keep allocations LeakSanitizer reports.
# ThreadSanitizer's reports go to files (one per process, the test helpers' too) and are printed at the end when
# the run fails, so that the report is the last thing a CI log shows. Sources must not lock with
# Synchronization.Mutex: the sanitizer does not see its locking and reports every contended access under it.
sanitize: deps
	@if grep -rn 'Mutex<' Sources; then \
		echo "Synchronization.Mutex locks with futex calls ThreadSanitizer cannot see: use Locked" >&2; exit 1; fi
	rm -rf .build-tsan/reports && mkdir -p .build-tsan/reports
	SWIFT_BACKTRACE=enable=no LMDBSTORE_SANITIZER=thread TSAN_OPTIONS="log_path=$(CURDIR)/.build-tsan/reports/tsan" \
		swift test --sanitize=thread --scratch-path .build-tsan \
		|| { cat .build-tsan/reports/tsan.* 2>/dev/null; exit 1; }
	@if ls .build-tsan/reports/tsan.* >/dev/null 2>&1; then cat .build-tsan/reports/tsan.*; exit 1; fi
	SWIFT_BACKTRACE=enable=no LMDBSTORE_SANITIZER=address ASAN_OPTIONS=detect_leaks=0 \
		swift test --sanitize=address --scratch-path .build-asan

# Each libFuzzer target for a minute (Fuzz/run --help for more).
fuzz: deps
	Fuzz/run

# Installs liblmdb (and SQLite's headers, for the benchmark's GRDB baseline) when they are missing.
deps:
	@if (pkg-config --exists lmdb 2>/dev/null || [ -f /usr/include/lmdb.h ] || [ -f /usr/local/include/lmdb.h ] || [ -f /opt/homebrew/include/lmdb.h ]) \
		&& ([ "$$(uname -s)" = "Darwin" ] || [ -f /usr/include/sqlite3.h ]); then \
		exit 0; \
	elif [ "$$(uname -s)" = "Darwin" ]; then \
		command -v brew >/dev/null || { echo "liblmdb is missing: install Homebrew, then run 'brew install lmdb'" >&2; exit 1; }; \
		brew install lmdb; \
	elif command -v apt-get >/dev/null; then \
		if [ "$$(id -u)" = "0" ]; then SUDO=""; \
		elif command -v sudo >/dev/null; then SUDO="sudo"; \
		else echo "liblmdb is missing: run 'apt-get install liblmdb-dev pkg-config' as root" >&2; exit 1; fi; \
		$$SUDO apt-get update && $$SUDO apt-get install -y liblmdb-dev libsqlite3-dev pkg-config; \
	else \
		echo "liblmdb is missing: install your system's LMDB development package (headers and lmdb.pc)" >&2; exit 1; \
	fi
