# LMDBStore — developer entry points. `make test` is what CI runs.
.PHONY: test deps

test: deps
	swift test

# Installs liblmdb (headers + pkg-config file) when it is missing.
deps:
	@if pkg-config --exists lmdb 2>/dev/null || [ -f /usr/include/lmdb.h ] || [ -f /usr/local/include/lmdb.h ] || [ -f /opt/homebrew/include/lmdb.h ]; then \
		exit 0; \
	elif [ "$$(uname -s)" = "Darwin" ]; then \
		command -v brew >/dev/null || { echo "liblmdb is missing: install Homebrew, then run 'brew install lmdb'" >&2; exit 1; }; \
		brew install lmdb; \
	elif command -v apt-get >/dev/null; then \
		if [ "$$(id -u)" = "0" ]; then SUDO=""; \
		elif command -v sudo >/dev/null; then SUDO="sudo"; \
		else echo "liblmdb is missing: run 'apt-get install liblmdb-dev pkg-config' as root" >&2; exit 1; fi; \
		$$SUDO apt-get update && $$SUDO apt-get install -y liblmdb-dev pkg-config; \
	else \
		echo "liblmdb is missing: install your system's LMDB development package (headers and lmdb.pc)" >&2; exit 1; \
	fi
