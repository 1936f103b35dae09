"""`make chaos`: the local runtime under real process deaths, and the invariants that must hold.

`python -m bench.chaos --instances 50 --shards 20 --kill-probability 0.25 [--json] [--results F]`

* `config`: the run's sizes and faults, and the deployment scaled down with template.yaml's
  rules kept (`ChaosConfig.problems`); a configuration that breaks them is refused.
* `driver`: the local runtime, the ticks (each delivered twice), the sweeps, the waits.
* `checks`: the invariants, read from the records through the product's own services.
* `report`: the tables, and the "Chaos run" sections of a results file (bench/results.md
  when asked: `make chaos` passes `--results bench/results.md`; otherwise the summary stays
  in the run's work directory).
* `cli`: the command line.
"""
