"""Chinchilla's parametric loss law and the data it was fitted on (the compute-optimal study's
ranking, :mod:`core.studies.optimal`).

``L(N, D) = E + A / N^alpha + B / D^beta`` in nats per token (Hoffmann et al. 2022, Eq. 2) with
Besiroglu et al. 2024's refit of Hoffmann et al.'s data, its compute-optimal ``(N, D)`` under
``6 N D = C`` (Eq. 4), and where a point lies outside the fit's data.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CHINCHILLA", "CHINCHILLA_DATA", "CHINCHILLA_DATA_SOURCE", "OUTSIDE_FIT",
           "chinchilla_loss", "outside_fit_range", "ln_vocab", "chinchilla_optimal"]

#: Parametric loss fit: Besiroglu et al. 2024's refit of Hoffmann et al. 2022's Approach 3.
CHINCHILLA = {"E": 1.8172, "A": 482.01, "B": 2085.43, "alpha": 0.3478, "beta": 0.3658}
#: What Chinchilla's loss fit was fitted on: models of 70 M to 16 B parameters ``n_params``
#: trained on 5 B to 500 B tokens ``tokens`` (Hoffmann et al. 2022, abstract: "training over
#: 400 language models ranging from 70 million to over 16 billion parameters on 5 to 500
#: billion tokens"; Besiroglu et al. 2024 refit the same data points). Outside it the loss is
#: the fit extrapolated.
CHINCHILLA_DATA = {"n_params": (7e7, 1.6e10), "tokens": (5e9, 5e11)}
#: Where :data:`CHINCHILLA_DATA` comes from.
CHINCHILLA_DATA_SOURCE = "Hoffmann et al. 2022"
#: The ways a candidate lies outside :data:`CHINCHILLA_DATA`, in this order
#: (:func:`outside_fit_range`).
OUTSIDE_FIT = ("n_params_below", "n_params_above", "tokens_below", "tokens_above")


def chinchilla_loss(n_params: float | np.ndarray, tokens: float | np.ndarray) -> float | np.ndarray:
    """Fitted pre-training loss ``E + A/N^alpha + B/D^beta`` in nats per token (Hoffmann et al.
    2022, Eq. 2, with :data:`CHINCHILLA`'s parameters). Raises ValueError for a non-positive N or D."""
    n, d = np.asarray(n_params, float), np.asarray(tokens, float)
    if np.any(n <= 0) or np.any(d <= 0):
        raise ValueError("parameters and tokens must be positive")
    c = CHINCHILLA
    out = c["E"] + c["A"] / n ** c["alpha"] + c["B"] / d ** c["beta"]
    return float(out) if out.ndim == 0 else out


def outside_fit_range(n_params: float, tokens: float) -> list[str]:
    """Where ``(n_params, tokens)`` lies outside the data Chinchilla's loss was fitted on
    (:data:`CHINCHILLA_DATA`: 70 M to 16 B parameters, 5 B to 500 B tokens, Hoffmann et al.
    2022): the :data:`OUTSIDE_FIT` words that hold, in their order (``"n_params_below"``,
    ``"n_params_above"``, ``"tokens_below"``, ``"tokens_above"``); ``[]`` inside, the bounds
    included. ``n_params`` in parameters, ``tokens`` in training tokens.

    Raises
    ------
    ValueError
        ``n_params`` or ``tokens`` not a positive finite number."""
    out = []
    for name, x in (("n_params", n_params), ("tokens", tokens)):
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"{name} must be a positive, finite number, not {x!r}")
        lo, hi = CHINCHILLA_DATA[name]
        if x < lo:
            out.append(f"{name}_below")
        elif x > hi:
            out.append(f"{name}_above")
    return out


def ln_vocab(vocab_size: int) -> float:
    """``ln V`` in nats per token: the loss of a uniform guess over a vocabulary of
    ``vocab_size`` tokens (the cross-entropy of ``1 / V`` on every token). A fitted loss above
    it is worse than guessing: the fit says nothing there. Raises ValueError for
    ``vocab_size < 1``."""
    if not vocab_size >= 1:
        raise ValueError(f"the vocabulary size must be at least 1, not {vocab_size!r}")
    return math.log(vocab_size)


def chinchilla_optimal(flops: float) -> tuple[float, float]:
    """``(N_opt, D_opt)`` minimizing :func:`chinchilla_loss` under ``6 N D = flops``
    (Hoffmann et al. 2022, Eq. 4). Raises ValueError for ``flops <= 0``."""
    if not flops > 0:
        raise ValueError("the compute budget must be positive")
    c = CHINCHILLA
    a, b = c["alpha"], c["beta"]
    g = (a * c["A"] / (b * c["B"])) ** (1.0 / (a + b))
    n = g * (flops / 6.0) ** (b / (a + b))
    return n, flops / 6.0 / n
