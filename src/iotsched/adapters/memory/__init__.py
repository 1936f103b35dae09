"""In-memory fakes of every port, for unit tests and the contract suite.

They enforce the same conditions as the DynamoDB/SQS/SNS adapters (the contract tests run one
suite on both) and record what tests need to see: sent messages and published alerts.

One module per part: `tasks` (the task store), `instances` and `shards` (the instance store,
its records and its shards), `store` (the stores as the ports see them, and MemoryStore with
the task's hold), `queues` (the queues and the alert sink).
"""
