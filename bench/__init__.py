"""iotsched's benchmarks: `make bench` (or `python -m bench`); see bench/run.py."""
