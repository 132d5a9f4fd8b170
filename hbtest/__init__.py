"""hbtest: Fourier-domain iterative hybrid testing of structures.

Conventions (see docs/method.md §0): SI units inside the code; harmonic coefficients
X_k = a_k - i b_k so that x(t) = a0 + Re sum_k X_k exp(i k Omega t).
"""

__version__ = "0.1.0"
