"""The benchmarks' engines: the worlds they build, what they run and measure. Each
`benches/NAME.py` is the command line of one benchmark and calls into these."""
