"""augdag's tests: a regular package, so that `tests` is this directory even where another distribution installs a
top-level `tests` package into site-packages (opustools does, through the `bench` extra's opusfilter)."""
