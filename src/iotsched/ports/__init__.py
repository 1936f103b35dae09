"""Ports: what the use-cases need from the outside world, stated as guarantees.

Each port has an in-memory fake in `iotsched.adapters.memory` and an AWS adapter; the contract
suite in `tests/contract/` runs against both, so the fake cannot drift from DynamoDB's
conditional semantics.
"""
