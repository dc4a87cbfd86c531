"""Energy of a training run, kWh and USD (docs/goodput.md, "Energy").

Board power of each GPU kind is its data sheet's maximum (TDP, :data:`GPU_BOARD_POWER_W`).
A GPU draws it while it computes and :data:`IDLE_POWER_FRACTION` of it while it waits, linear
in between (the utilisation-power model of Fan, Weber and Barroso 2007, "Power provisioning for a
warehouse-sized computer", ISCA, Sec. 4.1: ``P(u) = P_idle + (P_busy - P_idle) u``) with ``u``
the modelled share of the iteration a GPU computes (the report's ``compute_s`` over
``iteration_time_s``: pipeline bubbles and exposed communication are waits). The rest of a node
(CPUs, memory, NICs, NVSwitches, fans) follows its GPUs: at their board power it draws the data
sheet's maximum system power less the GPUs' (:data:`NODE_OVERHEAD_W_PER_GPU`, shared per GPU),
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

__all__ = [
    "GPU_BOARD_POWER_W",
    "IDLE_POWER_FRACTION",
    "NODE_OVERHEAD_W_PER_GPU",
    "POWER_SOURCES",
    "Energy",
    "energy",
    "gpu_power_w",
    "run_energy",
]

#: Board power (TDP) per GPU kind, watts; sources in :data:`POWER_SOURCES`.
GPU_BOARD_POWER_W = {"A100-SXM4-80GB": 400.0, "H100-SXM5-80GB": 700.0,
                     "H100-96GB-HBM2e-500W": 500.0, "H200-SXM-141GB": 700.0,
                     "B200-180GB": 1000.0, "GB200-NVL72": 1200.0,
                     "H800-SXM5-80GB": 700.0, "A800-SXM4-80GB": 400.0, "H20-96GB": 400.0,
                     "GH200-96GB": 1000.0, "B300-288GB": 1100.0}
#: Non-GPU power of a node per GPU with its GPUs at board power, watts: the data sheet's maximum
#: system power less the GPUs' board power, over the GPUs (see :data:`POWER_SOURCES`).
NODE_OVERHEAD_W_PER_GPU = {"A100-SXM4-80GB": (6500 - 8 * 400) / 8,
                           "H100-SXM5-80GB": (10200 - 8 * 700) / 8,
                           "H100-96GB-HBM2e-500W": (10200 - 8 * 700) / 8,
                           "H200-SXM-141GB": (10200 - 8 * 700) / 8,
                           "B200-180GB": (14300 - 8 * 1000) / 8,
                           "GB200-NVL72": (120000 - 72 * 1200) / 72,
                           "H800-SXM5-80GB": (10200 - 8 * 700) / 8,
                           "A800-SXM4-80GB": (6500 - 8 * 400) / 8,
                           "H20-96GB": (10200 - 8 * 700) / 8,
                           "GH200-96GB": 150.0,
                           "B300-288GB": (14500 - 8 * 1100) / 8}
POWER_SOURCES = {
    "A100-SXM4-80GB": "NVIDIA A100 data sheet: 400 W (SXM4); DGX A100 data sheet: 6.5 kW maximum",
    "H100-SXM5-80GB": "NVIDIA H100 data sheet: up to 700 W (SXM5); DGX H100 data sheet: about "
                      "10.2 kW maximum",
    "H100-96GB-HBM2e-500W": "capped at 500 W (Meta Grand Teton hosts); the node overhead taken "
                            "as DGX H100's (no data sheet)",
    "H200-SXM-141GB": "NVIDIA H200 data sheet: up to 700 W (SXM); DGX H200: about 10.2 kW maximum",
    "B200-180GB": "NVIDIA HGX B200: 1,000 W per GPU; DGX B200 data sheet: about 14.3 kW maximum",
    "GB200-NVL72": "1,200 W per GPU (a GB200 superchip's two GPUs with a share of its Grace "
                   "CPU); GB200 NVL72 rack about 120 kW (NVIDIA)",
    "H800-SXM5-80GB": "NVIDIA H800 SXM data sheet: up to 700 W (the H100 SXM board with its "
                      "NVLink reduced); node overhead taken as DGX H100's (10.2 kW maximum)",
    "A800-SXM4-80GB": "NVIDIA A800 SXM4 data sheet: 400 W; node overhead taken as DGX A100's "
                      "(6.5 kW maximum)",
    "H20-96GB": "HGX H20 partner briefs: 400 W per GPU (no NVIDIA data sheet); node overhead "
                "taken as DGX H100's (an assumption: an HGX Hopper chassis)",
    "GH200-96GB": "NVIDIA GH200 data sheet: the superchip is configurable from 450 to 1,000 W "
                  "for CPU, GPU and memory together (1,000 W taken); node overhead of 150 W per "
                  "superchip for NICs, fans and storage is an assumption (the Grace CPU is in "
                  "the module's figure)",
    "B300-288GB": "NVIDIA HGX B300: 1,100 W per GPU; DGX B300 about 14.5 kW maximum",
}
#: Share of board power a GPU draws while it waits (pipeline bubbles, exposed communication,
#: checkpoint stalls, restarts): an assumption, not a measurement. A waiting GPU keeps its
#: clocks and HBM powered; idle H100 SXM boards read 70-120 W of their 700 W.
IDLE_POWER_FRACTION = 0.15
#: Used for a GPU kind outside the tables (another profile store): the H100 SXM's figures.
_FALLBACK = "H100-SXM5-80GB"


def gpu_power_w(gpu: str, busy: float) -> tuple[float, float]:
    """``(power while training, power while waiting)`` of one GPU of kind ``gpu``, watts: the
    linear model of the module doc at busy share ``busy`` (clipped to 0..1)."""
    tdp = GPU_BOARD_POWER_W.get(gpu, GPU_BOARD_POWER_W[_FALLBACK])
    idle = IDLE_POWER_FRACTION * tdp
    u = min(max(busy, 0.0), 1.0)
    return idle + (tdp - idle) * u, idle


@dataclass
class Energy:
    """Energy of a run, kWh, and its price, USD (module doc). ``gpu_kwh`` + ``node_kwh`` is the
    machines' energy; ``facility_kwh`` what the PUE adds; ``energy_kwh`` the sum."""

    gpu_power_w: float
    gpu_idle_power_w: float
    #: the node's non-GPU power per GPU with the GPUs at board power (:data:`NODE_OVERHEAD_W_PER_GPU`)
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


def energy(*, gpu: str, num_gpus: int, busy: float, work_s: float, lost_work_s: float,
           stalled_s: float, pue: float,
           price_per_kwh_usd: float) -> Energy:
    """The energy of a run (module doc). Times in seconds; ``stalled_s``: checkpoint stalls and
    restarts (GPUs waiting)."""
    active, idle = gpu_power_w(gpu, busy)
    node = NODE_OVERHEAD_W_PER_GPU.get(gpu, NODE_OVERHEAD_W_PER_GPU[_FALLBACK])
    j = 1.0 / 3.6e6  # kWh per joule
    tdp = GPU_BOARD_POWER_W.get(gpu, GPU_BOARD_POWER_W[_FALLBACK])
    gpu_kwh = num_gpus * (active * (work_s + lost_work_s) + idle * stalled_s) * j
    node_kwh = gpu_kwh * node / tdp  # the node follows its GPUs' load
    total = pue * (gpu_kwh + node_kwh)
    return Energy(gpu_power_w=active, gpu_idle_power_w=idle, node_overhead_w_per_gpu=node,
                  busy_fraction=busy, power_usage_effectiveness=pue, gpu_kwh=gpu_kwh,
                  node_kwh=node_kwh, facility_kwh=total - gpu_kwh - node_kwh, energy_kwh=total,
                  energy_cost_usd=total * price_per_kwh_usd,
                  energy_kwh_without_failures=pue * num_gpus * active * (1 + node / tdp) * work_s * j,
                  source=POWER_SOURCES.get(gpu, f"{gpu}: no power figures; H100 SXM's used"))


def run_energy(session, report, goodput) -> Energy:
    """:func:`energy` of a simulated session with its :class:`core.sim.goodput.Goodput`."""
    T = report.iteration_time_s
    g = goodput
    return energy(gpu=session.cluster.gpu, num_gpus=report.num_gpus,
                  busy=report.compute_s / T if T > 0 else 0.0, work_s=g.work_s,
                  lost_work_s=g.lost_work_s, stalled_s=g.checkpoint_s + g.restart_s,
                  pue=session.cost.power_usage_effectiveness,
                  price_per_kwh_usd=session.cost.price_per_kwh_usd)
