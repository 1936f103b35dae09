"""iotsched's benchmarks: `make bench` (or `python -m bench`; see bench/run.py) and the chaos run
(`make chaos`, bench/chaos); their own tests are bench/tests (`make bench-test`)."""
