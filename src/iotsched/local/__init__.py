"""The local runtime: the AWS pieces moto lacks, emulated honestly.

moto (in server mode, `emulator`) provides DynamoDB, SQS and SNS. It never fires EventBridge
rules and never invokes Lambdas, so this package reads template.yaml (`template`), provisions
its resources into moto (`provision`), runs each function in processes of its own (`processes`,
`host`) kept alive by the `supervisor`, and fires the schedule rules on a real, accelerated or
manual clock (`delivery`). `runtime.LocalRuntime` composes them; `control` is its HTTP port.
"""

from __future__ import annotations
