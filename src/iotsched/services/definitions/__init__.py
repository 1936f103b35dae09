"""Task definitions: a task file validated and applied whole, versions and rollback, pausing,
resuming and deleting a task.

Ports: the task store (with its versions and the audit log), the handler registry.
"""
