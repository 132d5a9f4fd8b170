"""Subcommands of the hbtest CLI; each module has ``register(subparsers)``."""
