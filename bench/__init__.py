"""The maintained benchmarks (README.md here): run from the repository root as modules,
e.g. `python -m bench.bench_train`. Not part of the installed package."""
