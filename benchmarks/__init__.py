"""Benchmarks of omni-iceberg against named baselines measured in the same run.

Each benchmark is a module run from the repository root::

    python -m benchmarks.<name> [--quick]

and writes ``benchmarks/results/<name>.json`` and ``benchmarks/results/<name>.png``;
``python -m benchmarks.report`` regenerates ``benchmarks/RESULTS.md`` from the JSON files.
The machines are small and shared, so every figure is a *ratio* against a baseline
timed in the same run (trials interleaved, medians reported) - never an absolute
threshold. Scratch data (WARCs, catalogs, exports) goes to ``benchmarks/out/``
(git-ignored).
"""
