"""The force reconstruction rules by name (:mod:`hbtest.method.sensors`): a module of its own,
without numpy, so that the command line lists them without importing the numerics."""

FORCE_METHODS = ("finite-difference", "inertia", "segment")
