"""The modal fit's settings (:mod:`hbtest.analysis.modal`): a module of its own, without numpy,
so that the command line shows the defaults without importing the numerics."""

#: two-sided confidence level of the reported intervals
CONFIDENCE = 0.95
#: parametric bootstrap refits per mode
BOOTSTRAP_SAMPLES = 400
#: seed of the bootstrap's random generator
BOOTSTRAP_SEED = 0
