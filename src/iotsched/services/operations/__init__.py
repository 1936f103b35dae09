"""Operations: what operators read and do.

`views` (instances, shards, upcoming fires), `overview` (a window's figures), `logs` (an
attempt's log), `audit` (changes recorded before and settled after), `alerts` and
`alert_policy` (failure alerts, thresholds, silences, missed runs), `actions` (cancel and
rerun an instance). Ports: the stores, the alert sink and log, the attempt log store.
"""
