"""The API benchmark's figures: each request kind's timed runs made into medians and ratios.

The kinds measured in every round (bench/api.py's ``ALTERNATED``) have one timed run per
round; the others have one run. A kind's latency and CPU figures are the medians of its
runs' figures, and a ratio to the trivial route is the median of the rounds' ratios, so
a round the machine's other work slowed moves the figures by one run at most.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from _api_load import LoadResult
from _stores import percentile

# A request kind's server CPU at most this many times the trivial route's, in the same
# round; see bench/README.md.
TARGET_TO_TRIVIAL_CPU = 3.0
# The list's p99 (the median of its rounds'), below this; see bench/README.md.
TARGET_LIST_P99_MS = 50.0
# Deep page p50 at most this many times the first page's; see bench/README.md.
TARGET_DEEP_TO_FIRST_P50 = 1.5
# A token limited to projects: its list's server CPU at most this times the environment
# token's, in the same round; see bench/README.md.
TARGET_SCOPED_TO_ENV_CPU = 1.10


@dataclass
class Measured:
    """One request kind's timed run and the server's CPU seconds over it."""

    load: LoadResult
    server_cpu_s: float

    @property
    def served(self) -> int:
        """Requests the server answered: good answers and answers with another status."""
        return len(self.load.latencies_s) + self.load.error_count

    @property
    def cpu_ms_per_request(self) -> float | None:
        """The server's CPU milliseconds per request served; None when it served none."""
        return 1000 * self.server_cpu_s / self.served if self.served else None

    def latency_ms(self, fraction: float) -> float:
        """A nearest-rank percentile of the latencies, unanswered requests counted with a
        lower bound of theirs."""
        timed = self.load.latencies_s + self.load.unanswered_s
        return 1000 * percentile(timed or [0.0], fraction)


def median_of(values: list[float | None], places: int = 2) -> float | None:
    """The median of the values that are known, rounded; None if none is."""
    known = [value for value in values if value is not None]
    return round(statistics.median(known), places) if known else None


def cpu_ratios(runs: list[Measured], trivial: list[Measured]) -> list[float | None]:
    """Each round's server CPU per request of ``runs`` over the trivial route's."""
    ratios: list[float | None] = []
    for run, floor in zip(runs, trivial, strict=False):
        mine, floor_ms = run.cpu_ms_per_request, floor.cpu_ms_per_request
        ratios.append(mine / floor_ms if mine is not None and floor_ms else None)
    return ratios


def kind_figures(name: str, runs: list[Measured], by_round: bool) -> dict[str, Any]:
    """One kind's figures: medians over its runs, failures summed; with ``by_round``, its
    p99 and CPU of each round too."""
    out: dict[str, Any] = {
        f"{name}_p99_ms": median_of([run.latency_ms(0.99) for run in runs]),
        f"{name}_p50_ms": median_of([run.latency_ms(0.5) for run in runs]),
        f"{name}_max_ms": round(max(run.latency_ms(1.0) for run in runs), 2),
        f"{name}_rps": median_of([run.load.achieved_rps for run in runs]),
        f"{name}_errors": sum(run.load.error_count for run in runs),
        f"{name}_unanswered": sum(len(run.load.unanswered_s) for run in runs),
        f"{name}_generator_late_max_ms": round(
            1000 * max(run.load.lateness_max_s for run in runs), 2
        ),
        f"{name}_server_cpu_ms_per_request": median_of([run.cpu_ms_per_request for run in runs]),
    }
    if by_round:
        out[f"{name}_p99_ms_by_round"] = [round(run.latency_ms(0.99), 2) for run in runs]
        out[f"{name}_server_cpu_ms_by_round"] = [
            round(cpu, 2) if (cpu := run.cpu_ms_per_request) is not None else None for run in runs
        ]
    return out


def ratio_figures(measured: dict[str, list[Measured]]) -> dict[str, Any]:
    """The CPU ratios: list and start to the trivial route (medians of the rounds'), and
    the tokens' lists to the environment token's list of the same (first) round."""
    trivial = measured["trivial"]
    list_ratios = cpu_ratios(measured["list"], trivial)
    start_ratios = cpu_ratios(measured["start"], trivial)
    out: dict[str, Any] = {
        "list_to_trivial_cpu_ratio": median_of(list_ratios, 3),
        "start_to_trivial_cpu_ratio": median_of(start_ratios, 3),
        "list_to_trivial_cpu_ratio_by_round": [_round3(ratio) for ratio in list_ratios],
        "start_to_trivial_cpu_ratio_by_round": [_round3(ratio) for ratio in start_ratios],
    }
    first_list = measured["list"][:1]
    for kind, key in (
        ("list_store_token", "store_token_to_env_token_cpu_ratio"),
        ("list_scoped_token", "scoped_token_to_env_token_cpu_ratio"),
    ):
        ratios = cpu_ratios(measured[kind], first_list)
        out[key] = _round3(ratios[0]) if ratios else None
    deep, first = measured["deep_page"][0], first_list[0]
    out["deep_to_first_p50_ratio"] = round(deep.latency_ms(0.5) / first.latency_ms(0.5), 3)
    return out


def _round3(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


def meets_targets(out: dict[str, Any], measured: dict[str, list[Measured]]) -> bool:
    """Whether the figures meet bench/README.md's targets for the API."""
    failed = any(
        run.load.error_count or run.load.unanswered_s for runs in measured.values() for run in runs
    )
    checks = (
        (out["list_to_trivial_cpu_ratio"], TARGET_TO_TRIVIAL_CPU),
        (out["start_to_trivial_cpu_ratio"], TARGET_TO_TRIVIAL_CPU),
        (out["scoped_token_to_env_token_cpu_ratio"], TARGET_SCOPED_TO_ENV_CPU),
        (out["deep_to_first_p50_ratio"], TARGET_DEEP_TO_FIRST_P50),
    )
    within = all(value is not None and value <= target for value, target in checks)
    return within and out["list_p99_ms"] < TARGET_LIST_P99_MS and not failed
