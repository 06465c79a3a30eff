"""The `taguru` command line: every subcommand, above every other package of the project."""
