"""Scheduling policies as strategy classes, registered and selected by name."""
