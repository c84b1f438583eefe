#!/usr/bin/python3
"""How far one step of gradient staleness lowers the largest stable step of momentum (Adam's m).

Linear analysis on a quadratic of (preconditioned) curvature h, step a = lr * h:
    m_t     = beta * m_{t-1} + (1 - beta) * g_t
    x_{t+1} = x_t - a * m_t
with the gradient g_t = h * p_t taken at
  * fresh (1f1b):                 p_t = x_t
  * stale (2bw, deferred):        p_t = x_{t-1} + c * (x_{t-1} - x_{t-2})   (c: training.lookahead)
  * partly stale (2bw, eager):    a fraction f of the microbatches at x_{t-1}, the rest at x_t.
Prints the largest a for which the iteration is stable (spectral radius < 1). Adam trains near that
edge (its preconditioned sharpness rises until it reaches it), so a lower edge holds the model in
flatter regions. docs/notes/gpt-kjv.md tells what it explains.

Usage: /usr/bin/python3 bench/stale_momentum_stability.py   (numpy: Debian python3-numpy)
"""
import numpy as np


def largest_stable_step(transition):
    """Bisects a in [0, 100] for the largest a with spectral radius of transition(a) below 1."""
    lo, hi = 0.0, 100.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if max(abs(np.linalg.eigvals(transition(mid)))) < 1 - 1e-9:
            lo = mid
        else:
            hi = mid
    return lo


def stale(beta, c):
    """State [x_t, x_{t-1}, x_{t-2}, m_{t-1}]; the gradient at x_{t-1} + c (x_{t-1} - x_{t-2})."""

    def transition(a):
        m = np.array([0.0, (1 - beta) * (1 + c), -(1 - beta) * c, beta])
        return np.array([np.array([1.0, 0, 0, 0]) - a * m, [1, 0, 0, 0], [0, 1, 0, 0], m])

    return largest_stable_step(transition)


def mixed(beta, f):
    """State [x_t, x_{t-1}, m_{t-1}]; a fraction f of the gradient at x_{t-1}."""

    def transition(a):
        m = np.array([(1 - beta) * (1 - f), (1 - beta) * f, beta])
        return np.array([np.array([1.0, 0, 0]) - a * m, [1, 0, 0], m])

    return largest_stable_step(transition)


def main():
    beta = 0.9
    print(f"momentum beta {beta}: largest stable lr * curvature")
    print(f"  fresh gradient (1f1b):                   {mixed(beta, 0.0):6.2f}")
    for c in (0.0, 1.0, 1.5, 2.0, 3.0):
        print(f"  one step stale, lookahead {c:3.1f} (2bw):     {stale(beta, c):6.2f}")
    for f in (1 / 16, 1 / 8, 1 / 4):
        print(f"  a fraction {f:5.3f} stale (eager 2bw):     {mixed(beta, f):6.2f}")


if __name__ == "__main__":
    main()
