"""Writes that must survive a crash, shared by the job's operators, the consumers and the CLI: fsync of
files and folders (`files`), the append-only governance audit log (`audit_log`) and the S3-compatible
object store WARC files are uploaded to (`object_store`). It sits below `operators`, `crawler` and
`consumers` and above `udfs`, and imports none of them but `udfs`; no PyFlink.
"""
