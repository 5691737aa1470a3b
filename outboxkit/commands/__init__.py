"""The `outboxkit` command groups, one module each: every module has an ``add_parser(sub)`` that
adds its group to the command line, and the handler that runs it with its settings."""
