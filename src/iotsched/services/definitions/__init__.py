"""Task definitions: what the scheduler is asked to run, and the operators' edits of it.

`task_file` reads a task file whole (with `task_checks`, the checks of one task), then
`dependencies` and `calendars` check what its tasks name, and `apply` writes all of it or none.
`history` keeps every version and rolls a task back to one; `control` pauses, resumes and
deletes a task.

Ports: the task store (with its versions and the audit log), the handler registry; a forced
delete ends open instances through the lifecycle.
"""
