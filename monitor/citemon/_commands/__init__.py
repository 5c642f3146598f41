"""One module per ``citemon`` subcommand.

Each module's docstring is its help text; it defines ``add_arguments(parser)`` and
``main(args) -> int`` (the exit status). :data:`citemon.cli.COMMANDS` lists them (with their
one-line help, so ``citemon --help`` imports none of them); modules named ``_…`` are shared
helpers, not commands.
"""
