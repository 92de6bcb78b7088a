"""The benchmarks, one module each, run through one entry point: `bench/NAME [ARGS]` (or
`loadwise-bench NAME [ARGS]`), which installs the tools and runs `python -m
loadwise_dev.benches NAME ARGS`. Each module's docstring says what it measures."""
