"""Size bounds of classical hybrid tests (a leaf module: no imports, cheap for the command
line to show in its help).

- :data:`MAX_STEPS` — time steps of one run: the loop keeps its whole history in memory,
  about ``8 (4 + 13 n_ch)`` bytes a step (0.25 GB at the bound for two channels), and costs
  some 20-40 us a step;
- :data:`MAX_PREDICTOR_ORDER`, :data:`MAX_PREDICTOR_SAMPLES` — polynomial forward
  predictors (higher orders amplify noise and round-off without predicting better).
"""

MAX_STEPS = 1_000_000
MAX_PREDICTOR_ORDER = 10
MAX_PREDICTOR_SAMPLES = 60
