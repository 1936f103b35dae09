"""Notices: what the scheduler tells people, for every capability to use.

`alerts` builds an instance's alert and sends it through the alert log (recorded `pending`,
published, marked sent, so a death between never loses it); `alert_policy` decides whether an
end alerts (thresholds, silences, the recovery after a failing streak, missed runs);
`audit` records an operator's change of several writes (`pending` before, settled after).
Ports: the alert sink and the alert log, the task store (alert state, audit records), the
clock. Nothing here imports another capability.
"""
