"""`python -m flows.cli`: the `augdag` command."""

from flows.cli import main

main()
