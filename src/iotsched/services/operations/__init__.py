"""Operations: what operators read and do.

`views` (tasks, instances, shards, upcoming fires), `overview` (a window's figures), `logs` (an
attempt's log), `audit` (changes of several writes recorded before and settled after), `alerts`
and `alert_policy` (failure alerts, thresholds, silences, recovery, missed runs), `actions`
(operator actions on instances: cancel, rerun). Ports: the task store (audit records, alert
state), the instance store, the alert sink and the alert log, the attempt log store, the queue
gauge, the clock; ending an instance goes through the lifecycle.
"""
