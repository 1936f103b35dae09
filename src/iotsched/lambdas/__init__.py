"""The Lambda functions' Powertools glue, the entry-point ring around the use-cases: each
module serves one function of `functions/` (its event parsed, its batch through Powertools'
BatchProcessor, its metrics into the invocation's EMF document) and imports only what that
function runs, so no function's cold start loads another's code.
"""
