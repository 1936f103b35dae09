"""The local runtime: the AWS pieces moto lacks, emulated honestly.

moto (in server mode) provides DynamoDB, SQS and SNS. It never fires EventBridge rules and
never invokes Lambdas, so this package reads template.yaml, provisions its resources into moto,
fires the tick rule on a (real or accelerated) clock, and polls the shard queue like a Lambda
event source mapping, running each function in its own process.
"""

from __future__ import annotations
