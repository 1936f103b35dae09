"""`iotsched demo`: the IoT task library on a simulated fleet, on the embedded emulator.

`run` drives it; `fleet` seeds the simulated devices, `fleet_phase` runs the device-touching
tasks under a rollout rate, `ticks` delivers adverse ticks, `effects` and `summary` read back
and show what the run left.
"""
