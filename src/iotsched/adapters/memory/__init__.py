"""In-memory fakes of every port, for unit tests and the contract suite.

They enforce the same conditions as the DynamoDB/SQS/SNS adapters (the contract tests run one
suite on both) and record what tests need to see: sent messages and published alerts.

One module per part: `tasks` and `alertstate` (the task store), `instances`, `shards`, `gates`
and `slots` (the instance store), `store` (the stores as the ports see them, and MemoryStore
with the task's hold), `queues` (the queues and the alert sink), `devices` (the Device
Management System).
"""
