"""What the benchmarks share and import; none of these modules is a benchmark to run."""
