"""One module per ``citemon`` subcommand.

Each module's docstring is its help text; it defines ``add_arguments(parser)`` and
``main(args) -> int`` (the exit status). :mod:`citemon.cli` finds them here.
"""
