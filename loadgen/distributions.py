"""Distributions a workload draws from, written as short specs on the command line.

    500                    a constant (same as const:500)
    const:500
    uniform:250,1000       uniform between the bounds
    choice:250,500,1000    one of the values, equally likely
    exp:10                 exponential with mean 10
    pareto:2.5,40          Pareto with shape 2.5 and mean 40 (shape must exceed 1)
    lognormal:8,1.2        log-normal with median 8 and sigma 1.2

Pareto is given by its mean rather than its scale because experiments are stated that way
(SRPT+R: "Pareto job sizes with mean 40"); the scale is mean x (shape - 1) / shape. Draws use
the standard library's `random.Random`, so a seed gives the same workload everywhere.

`noise(cov)` is the multiplicative noise of recurring job families (loadgen/synthesis.py): a
log-normal of mean 1 and the given coefficient of variation; `log_uniform(factor)` a factor
whose logarithm is uniform in [-log factor, log factor].
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from common.errors import InvalidInput

_ARITY = {"const": (1, 1), "uniform": (2, 2), "choice": (1, None), "exp": (1, 1),
          "pareto": (2, 2), "lognormal": (2, 2)}
KINDS = tuple(_ARITY)


@dataclass(frozen=True, slots=True)
class Distribution:
    kind: str
    params: tuple[float, ...]

    def sample(self, rng: random.Random) -> float:
        p = self.params
        match self.kind:
            case "const":
                return p[0]
            case "uniform":
                return rng.uniform(p[0], p[1])
            case "choice":
                return p[rng.randrange(len(p))]
            case "exp":
                return rng.expovariate(1.0 / p[0])
            case "pareto":
                shape, mean = p
                return rng.paretovariate(shape) * mean * (shape - 1) / shape
            case "lognormal":
                return rng.lognormvariate(math.log(p[0]), p[1])
        raise AssertionError(self.kind)

    def sample_int(self, rng: random.Random, minimum: int = 1) -> int:
        """A draw rounded to an integer, at least `minimum` (task counts, millicores, MiB)."""
        return max(minimum, round(self.sample(rng)))

    @property
    def mean(self) -> float:
        p = self.params
        match self.kind:
            case "const":
                return p[0]
            case "uniform":
                return (p[0] + p[1]) / 2
            case "choice":
                return sum(p) / len(p)
            case "exp" | "pareto":
                return p[-1]
            case "lognormal":
                return p[0] * math.exp(p[1] ** 2 / 2)
        raise AssertionError(self.kind)

    def __str__(self) -> str:
        return f"{self.kind}:{','.join(f'{v:g}' for v in self.params)}"


def parse_distribution(text: str, option: str) -> Distribution:
    """`text` as a Distribution; an `InvalidInput` naming `option` says what is wrong."""
    kind, sep, rest = text.strip().partition(":")
    if not sep:
        kind, rest = "const", kind
    kind = kind.strip().lower()
    if kind not in _ARITY:
        raise InvalidInput(option, f"unknown distribution {kind!r} in {text!r} "
                                   f"(known: {', '.join(KINDS)}, or a plain number)")
    try:
        params = tuple(float(part) for part in rest.split(","))
    except ValueError:
        raise InvalidInput(option, f"{text!r}: parameters must be numbers") from None
    low, high = _ARITY[kind]
    if len(params) < low or (high is not None and len(params) > high):
        wanted = f"{low}" if low == high else f"at least {low}"
        raise InvalidInput(option, f"{text!r}: {kind} takes {wanted} parameter(s), "
                                   f"got {len(params)}")
    if not all(math.isfinite(v) and v >= 0 for v in params):
        raise InvalidInput(option, f"{text!r}: parameters must be finite and >= 0")
    if kind == "uniform" and params[0] > params[1]:
        raise InvalidInput(option, f"{text!r}: the lower bound exceeds the upper")
    if kind in ("exp", "lognormal") and params[0] <= 0:
        raise InvalidInput(option, f"{text!r}: the {'mean' if kind == 'exp' else 'median'} "
                                   f"must be positive")
    if kind == "pareto" and (params[0] <= 1 or params[1] <= 0):
        raise InvalidInput(option, f"{text!r}: pareto needs shape > 1 (a finite mean) and a "
                                   f"positive mean")
    return Distribution(kind, params)


def noise(cov: float) -> Distribution:
    """Multiplicative noise of mean 1 and coefficient of variation `cov` (0: the constant 1):
    log-normal with sigma^2 = ln(1 + cov^2) and median exp(-sigma^2 / 2)."""
    if not (math.isfinite(cov) and cov >= 0):
        raise InvalidInput("cov", f"must be a finite number >= 0, got {cov}")
    if cov == 0:
        return Distribution("const", (1.0,))
    sigma = math.sqrt(math.log1p(cov * cov))
    return Distribution("lognormal", (math.exp(-sigma * sigma / 2), sigma))


def log_uniform(rng: random.Random, factor: float) -> float:
    """A factor between 1/`factor` and `factor` whose logarithm is uniform (as likely to halve
    as to double)."""
    return math.exp(rng.uniform(-math.log(factor), math.log(factor)))
