"""Energy of a training run, kWh and USD (docs/goodput.md, "Energy").

Board power of each GPU kind is its data sheet's maximum (TDP), from the ``power`` object of its
GPU spec file (``resources/gpu_specs/<kind>.json``, :class:`core.store.gpu_spec.GpuPower`, each
figure with its source); a kind whose spec gives none gets no energy, never another kind's.
A GPU draws it while it computes and :data:`IDLE_POWER_FRACTION` of it while it waits, linear
in between (the utilisation-power model of Fan, Weber and Barroso 2007, "Power provisioning for a
warehouse-sized computer", ISCA, Sec. 4.1: ``P(u) = P_idle + (P_busy - P_idle) u``) with ``u``
the modelled share of the iteration a GPU computes (the report's ``compute_s`` over
``iteration_time_s``: pipeline bubbles and exposed communication are waits). The rest of a node
(CPUs, memory, NICs, NVSwitches, fans) follows its GPUs: at their board power it draws the data
sheet's maximum system power less the GPUs' (the spec's ``system_max_w``, shared per GPU),
and below it the same share of that (an assumption: fans, power conversion, CPUs feeding the
GPUs and NICs carrying their traffic are loaded as the GPUs are). The facility adds its power
usage effectiveness (``cost.power_usage_effectiveness``).

Over a run with failures (:mod:`core.sim.goodput`), the work and the work lost to failures run at the
modelled power, checkpoint stalls and restarts at idle power:

    E_gpu = N (P(u) (W + lost) + P_idle (checkpoints + restarts)) / 3.6e6 kWh
    E = PUE (1 + P_node / TDP) E_gpu

with ``N`` the GPUs, ``W`` the work, seconds, ``P_node`` the overhead per GPU. Meta's model
cards count GPU-hours times TDP (Llama 3.1 405B: 30.84 M GPU-hours at 700 W); that is the ``gpu`` term with
``u = 1``, no node overhead and a PUE of 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.store.gpu_spec import GpuPower, gpu_power

__all__ = [
    "IDLE_POWER_FRACTION",
    "Energy",
    "energy",
    "gpu_power_w",
    "no_power_figures",
    "run_energy",
]

#: Share of board power a GPU draws while it waits (pipeline bubbles, exposed communication,
#: checkpoint stalls, restarts): an assumption, not a measurement. A waiting GPU keeps its
#: clocks and HBM powered; idle H100 SXM boards read 70-120 W of their 700 W.
IDLE_POWER_FRACTION = 0.15


def no_power_figures(gpu: str) -> str:
    """Why the energy of a run on GPU kind ``gpu`` is not computed: its spec gives no power."""
    return (f"energy not computed: GPU kind {gpu!r} has no power figures (add \"power\" to its "
            "GPU spec file, docs/profile_store.md)")


def gpu_power_w(power: GpuPower, busy: float) -> tuple[float, float]:
    """``(power while training, power while waiting)`` of one GPU with figures ``power``, watts:
    the linear model of the module doc at busy share ``busy`` (clipped to 0..1)."""
    tdp = power.board_w
    idle = IDLE_POWER_FRACTION * tdp
    u = min(max(busy, 0.0), 1.0)
    return idle + (tdp - idle) * u, idle


@dataclass
class Energy:
    """Energy of a run, kWh, and its price, USD (module doc). ``gpu_kwh`` + ``node_kwh`` is the
    machines' energy; ``facility_kwh`` what the PUE adds; ``energy_kwh`` the sum."""

    gpu_power_w: float
    gpu_idle_power_w: float
    #: the node's non-GPU power per GPU with the GPUs at board power (the spec's ``power``)
    node_overhead_w_per_gpu: float
    busy_fraction: float
    power_usage_effectiveness: float
    gpu_kwh: float
    node_kwh: float
    facility_kwh: float
    energy_kwh: float
    energy_cost_usd: float
    #: the energy of the run without failures or checkpoints (the report's training days)
    energy_kwh_without_failures: float
    source: str


def energy(*, power: GpuPower, num_gpus: int, busy: float, work_s: float, lost_work_s: float,
           stalled_s: float, pue: float, price_per_kwh_usd: float) -> Energy:
    """The energy of a run (module doc) on GPUs with figures ``power``
    (:func:`core.store.gpu_spec.gpu_power`). Times in seconds; ``stalled_s``: checkpoint stalls
    and restarts (GPUs waiting)."""
    active, idle = gpu_power_w(power, busy)
    node = power.node_overhead_w_per_gpu
    j = 1.0 / 3.6e6  # kWh per joule
    tdp = power.board_w
    gpu_kwh = num_gpus * (active * (work_s + lost_work_s) + idle * stalled_s) * j
    node_kwh = gpu_kwh * node / tdp  # the node follows its GPUs' load
    total = pue * (gpu_kwh + node_kwh)
    return Energy(gpu_power_w=active, gpu_idle_power_w=idle, node_overhead_w_per_gpu=node,
                  busy_fraction=busy, power_usage_effectiveness=pue, gpu_kwh=gpu_kwh,
                  node_kwh=node_kwh, facility_kwh=total - gpu_kwh - node_kwh, energy_kwh=total,
                  energy_cost_usd=total * price_per_kwh_usd,
                  energy_kwh_without_failures=pue * num_gpus * active * (1 + node / tdp) * work_s * j,
                  source=power.source)


def run_energy(session, report, goodput) -> Energy | None:
    """:func:`energy` of a simulated session with its :class:`core.sim.goodput.Goodput`; None when
    the session's GPU kind has no power figures (:func:`no_power_figures` says so)."""
    power = gpu_power(session.cluster.gpu)
    if power is None:
        return None
    T = report.iteration_time_s
    g = goodput
    return energy(power=power, num_gpus=report.num_gpus,
                  busy=report.compute_s / T if T > 0 else 0.0, work_s=g.work_s,
                  lost_work_s=g.lost_work_s, stalled_s=g.checkpoint_s + g.restart_s,
                  pue=session.cost.power_usage_effectiveness,
                  price_per_kwh_usd=session.cost.price_per_kwh_usd)
