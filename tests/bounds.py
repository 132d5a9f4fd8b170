"""Thresholds shared by several tests, each with the spread it was measured against."""

#: bound of one seeded short sweep's largest FRF error against the exact structure. The threshold audit
#: (``benchmarks/threshold_audit.py``: seed shifts 0-2 and OpenBLAS Sandybridge) measured the maxima of the tests
#: using it at 0.26-0.90 %, mean ~0.55 %, sd ~0.17 %: 1 % was 2.1-2.9 spreads away; 1.25 % is >= 4. The 1 % acceptance
#: over seeds is ``benchmarks/rig_time.py``'s (max 0.76 % over seeds 1-4, both benchmark sweeps).
ONE_SWEEP_FRF_BOUND = 0.0125
