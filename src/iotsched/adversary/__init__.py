"""An adversarial DynamoDB: a WSGI middleware in front of moto that fails as DynamoDB does
where moto does not (size rules, throttling, lost responses, races), on a fault schedule.

`limits` holds DynamoDB's size and update-path rules, `schedule` what to inject and when,
`protocol` the wire format of its answers, `middleware` the WSGI app (`Adversary`) that the
embedded emulator, the contract tests and the chaos run put before moto.
"""
