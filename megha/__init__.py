"""The project's one command-line entry point (`megha`, or `python -m megha`)."""
