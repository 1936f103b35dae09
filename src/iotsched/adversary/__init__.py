"""An adversarial DynamoDB: a WSGI middleware in front of moto that behaves as DynamoDB does
where moto does not (size rules, throttling, lost responses, races), on a fault schedule.

The embedded emulator (`EmulatorServer(adversary=...)`), the contract tests and the chaos run
import it from here.
"""
