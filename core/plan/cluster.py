"""The cluster, cost and reliability records (:class:`ClusterConfig`, :class:`CostConfig`,
:class:`ReliabilityConfig`) and the GPU kinds: the shipped kinds and their NVLink domains,
FP8 support and reference-node networks, and the mapping of other tools' GPU names to them
(:func:`gpu_kind`).

A new GPU kind (with its profile store), a new cluster, cost or reliability field goes here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from core.plan.fields import BOUNDS, described_field

__all__ = ["GPU_KINDS", "GPU_NVLINK_DOMAIN", "GPU_HOST_GPUS", "NVLINK_DOMAIN_SPANS_HOSTS",
           "gpus_per_host", "processes_per_host", "GPU_FP8_DTYPES", "GPU_NIC_GBITS_PER_GPU",
           "node_network_gbits_per_s", "node_network", "NODE_FIELDS", "has_reference_network",
           "on_gpu_kind",
           "ClusterConfig", "CostConfig",
           "LLAMA3_FAILURES_PER_GPU_HOUR", "ReliabilityConfig", "gpu_kind"]


#: GPU kinds with a shipped profile store; the value is the store's file stem
#: (``profiles/<kind>.h5``, built from ``resources/gpu_specs/<kind>.json``).
#: ``H100-96GB-HBM2e-500W`` has no data sheet of its own: its store's peaks are the H100 SXM5's,
#: and the share of them it sustains under its 500 W cap is fitted on its published runs
#: (``peak_fraction``, docs/accuracy.md). The kinds people rent that no published run measures
#: (H800 and A800: the H100's and A100's compute with NVLink cut to 400 GB/s; H20, B300, GH200)
#: take the calibrated parameters of their architecture (the A100's for the A800, the shared
#: Hopper/Blackwell fit for the others), applied to their own data-sheet figures.
GPU_KINDS = ("A100-SXM4-80GB", "A800-SXM4-80GB", "H100-SXM5-80GB", "H100-96GB-HBM2e-500W",
             "H800-SXM5-80GB", "H20-96GB", "H200-SXM-141GB", "GH200-96GB", "B200-180GB",
             "B300-288GB", "GB200-NVL72")


#: GPUs that reach each other over NVLink, per GPU kind (``gpus_per_nvlink_domain`` of its
#: spec file; a test keeps the two equal): 8 on HGX/DGX boards, 72 in a GB200 NVL72 rack, 256
#: in a DGX GH200 (its NVLink Switch System; smaller GH200 nodes fit inside it).
#: ``cluster.gpus_per_node`` may not exceed it: the GPUs of a node talk over NVLink.
GPU_NVLINK_DOMAIN = {"A100-SXM4-80GB": 8, "A800-SXM4-80GB": 8, "H100-SXM5-80GB": 8,
                     "H100-96GB-HBM2e-500W": 8, "H800-SXM5-80GB": 8, "H20-96GB": 8,
                     "H200-SXM-141GB": 8, "GH200-96GB": 256, "B200-180GB": 8, "B300-288GB": 8,
                     "GB200-NVL72": 72}


#: GPUs of one host (the machine one operating system runs, where torchrun starts
#: ``--nproc-per-node`` processes and whose storage link writes checkpoints), per GPU kind:
#: 8 on HGX/DGX boards (DGX A100/H100/H200/B200/B300 data sheets: 8 GPUs per system); 4 in a
#: GB200 NVL72 compute tray (NVIDIA GB200 NVL72 data sheet: 18 compute trays of 2 GB200
#: superchips, each one Grace CPU and two Blackwell GPUs, for 72 GPUs and 36 CPUs); 1 per GH200
#: superchip (NVIDIA GH200 data sheet: one Grace CPU and one Hopper GPU; a DGX GH200's 256
#: superchips are 256 hosts). Where it is below :data:`GPU_NVLINK_DOMAIN`, a "node"
#: (``cluster.gpus_per_node``, the NVLink domain) spans several hosts.
GPU_HOST_GPUS = {"A100-SXM4-80GB": 8, "A800-SXM4-80GB": 8, "H100-SXM5-80GB": 8,
                 "H100-96GB-HBM2e-500W": 8, "H800-SXM5-80GB": 8, "H20-96GB": 8,
                 "H200-SXM-141GB": 8, "GH200-96GB": 1, "B200-180GB": 8, "B300-288GB": 8,
                 "GB200-NVL72": 4}

#: GPU kinds whose hosts always sit in the full NVLink domain: a GB200 NVL72 compute tray is
#: part of its rack's 72-GPU NVLink domain, so a launch of 4 processes per host is a node of
#: 72. Not the GH200: only a DGX GH200's NVLink Switch System joins its hosts; most rented
#: GH200 hosts reach each other over the network only.
NVLINK_DOMAIN_SPANS_HOSTS = frozenset({"GB200-NVL72"})


def gpus_per_host(cluster: "ClusterConfig") -> int:
    """GPUs of one host of ``cluster``: its GPU kind's :data:`GPU_HOST_GPUS`, at most the
    node's ``gpus_per_node`` (a node of 4 H100s is a host of 4); ``gpus_per_node`` for a kind
    without an entry."""
    return min(cluster.gpus_per_node, GPU_HOST_GPUS.get(cluster.gpu, cluster.gpus_per_node))


def processes_per_host(cluster: "ClusterConfig", world: int) -> int:
    """The processes a launcher runs per host for ``world`` GPUs of ``cluster``: its
    :func:`gpus_per_host` (at most the world); for a world inside one NVLink domain that spans
    hosts (:data:`NVLINK_DOMAIN_SPANS_HOSTS`: at most one GB200 rack) the largest count up to
    that which divides the world (6 GB200s: 2 hosts of 3), since its hosts may run fewer. A
    larger world fills its hosts (racks of 72 as the simulation has them); one it does not
    divide is the caller's to refuse."""
    per_host = min(world, gpus_per_host(cluster))
    if cluster.gpu in NVLINK_DOMAIN_SPANS_HOSTS and per_host < world <= cluster.gpus_per_node:
        per_host = max(g for g in range(1, per_host + 1) if world % g == 0)
    return per_host


#: FP8 GEMM dtypes each shipped GPU kind has tensor cores for: the ``fp8`` / ``mxfp8`` keys of its
#: spec file's ``peak_tflops`` (a test keeps the two equal). The A100 (Ampere) has none; Hopper
#: has per-tensor scaled FP8; Blackwell adds MXFP8 (32-element blocks, E8M0 scales).
GPU_FP8_DTYPES = {"A100-SXM4-80GB": (), "A800-SXM4-80GB": (), "H100-SXM5-80GB": ("fp8",),
                  "H100-96GB-HBM2e-500W": ("fp8",), "H800-SXM5-80GB": ("fp8",),
                  "H20-96GB": ("fp8",), "H200-SXM-141GB": ("fp8",), "GH200-96GB": ("fp8",),
                  "B200-180GB": ("fp8", "mxfp8"), "B300-288GB": ("fp8", "mxfp8"),
                  "GB200-NVL72": ("fp8", "mxfp8")}


#: Scale-out NIC bandwidth per GPU of each shipped GPU kind's reference node, Gb/s: the
#: ``nic_gbits_per_s`` of its spec file (a test keeps the two equal; sources there: DGX A100
#: 8 x 200 Gb/s HDR, DGX H100/H200/B200 8 x 400 Gb/s ConnectX-7, GB200 NVL72 one 400 Gb/s NIC
#: per GPU, DGX GH200 one 400 Gb/s per superchip, DGX B300 8 x 800 Gb/s ConnectX-8; the A800,
#: H800 and H20 assume their A100/H100 reference nodes'). :func:`node_network_gbits_per_s` uses
#: it when a session leaves the network empty.
GPU_NIC_GBITS_PER_GPU = {"A100-SXM4-80GB": 200.0, "A800-SXM4-80GB": 200.0,
                         "H100-SXM5-80GB": 400.0, "H100-96GB-HBM2e-500W": 400.0,
                         "H800-SXM5-80GB": 400.0, "H20-96GB": 400.0, "H200-SXM-141GB": 400.0,
                         "GH200-96GB": 400.0, "B200-180GB": 400.0, "B300-288GB": 800.0,
                         "GB200-NVL72": 400.0}


def node_network_gbits_per_s(cluster: "ClusterConfig") -> float:
    """The network bandwidth of one node, Gb/s (all its NICs together):
    ``cluster.inter_node_bandwidth_gbits_per_s``, or when that is empty (None) the GPU's
    reference node, ``gpus_per_node`` NICs of :data:`GPU_NIC_GBITS_PER_GPU` (one NIC per GPU:
    3,200 for eight H100s, 28,800 for a GB200 NVL72 rack).

    Raises
    ------
    ValueError
        The field is empty and the GPU kind has no reference node (a store of your own):
        the bandwidth must be given (:func:`validate` says so for plans that span nodes).
    """
    bw = cluster.inter_node_bandwidth_gbits_per_s
    if bw is not None:
        return float(bw)
    nic = GPU_NIC_GBITS_PER_GPU.get(cluster.gpu)
    if nic is None:
        raise ValueError(f"cluster.inter_node_bandwidth_gbits_per_s is empty and GPU "
                         f"{cluster.gpu!r} has no reference node to take it from: set the "
                         "network bandwidth per node")
    return nic * cluster.gpus_per_node


#: The cluster fields :func:`on_gpu_kind` moves with the GPU kind (the node).
NODE_FIELDS = ("gpus_per_node", "inter_node_bandwidth_gbits_per_s")


def node_network(cluster: "ClusterConfig") -> float | None:
    """The node's network bandwidth of ``cluster``, Gb/s (:func:`node_network_gbits_per_s`),
    or None when neither the cluster nor its GPU kind gives one (a store of your own of an
    unknown kind): for reports that name the node they held."""
    try:
        return float(node_network_gbits_per_s(cluster))
    except ValueError:
        return None


def has_reference_network(cluster: "ClusterConfig") -> bool:
    """Whether the cluster's network per node is its GPU kind's reference node's, written
    out: one NIC of :data:`GPU_NIC_GBITS_PER_GPU` per GPU (3,200 Gb/s for 8 H100s); False when
    it is empty or the kind has no reference node."""
    nic = GPU_NIC_GBITS_PER_GPU.get(cluster.gpu)
    bw = cluster.inter_node_bandwidth_gbits_per_s
    return bw is not None and nic is not None and bw == nic * cluster.gpus_per_node


def on_gpu_kind(cluster: "ClusterConfig", gpu: str,
                gpus_per_node: int | None = None) -> "ClusterConfig":
    """``cluster`` with GPU kind ``gpu`` (a copy), its node following the kind, or of
    ``gpus_per_node`` GPUs when given (the user's own node size, set with the kind).

    The GPUs per node and the network per node that were the old kind's reference node
    (:data:`GPU_NVLINK_DOMAIN`; :data:`GPU_NIC_GBITS_PER_GPU` times the GPUs per node: the
    3,200 Gb/s of an 8-GPU H100 node) become the new kind's (72 GPUs and 28,800 Gb/s for a
    GB200 NVL72 rack); values set to something else stay, except that a network of one's own
    keeps its share per GPU when the node's size moves (800 Gb/s for 8 GPUs, 100 per GPU, is
    7,200 for a 72-GPU rack): the field is the whole node's. Without this an H100 session
    moved to GB200 kept 3,200 Gb/s for a 72-GPU rack, 44 Gb/s per GPU.
    """
    import dataclasses
    new = dataclasses.replace(cluster, gpu=gpu)
    domain, old_domain = GPU_NVLINK_DOMAIN.get(gpu), GPU_NVLINK_DOMAIN.get(cluster.gpu)
    if gpus_per_node is not None:
        new.gpus_per_node = gpus_per_node
    elif domain is not None and cluster.gpus_per_node == old_domain:
        new.gpus_per_node = domain
    nic = GPU_NIC_GBITS_PER_GPU.get(gpu)
    bw = cluster.inter_node_bandwidth_gbits_per_s
    if nic is not None and has_reference_network(cluster):
        new.inter_node_bandwidth_gbits_per_s = nic * new.gpus_per_node
    elif bw is not None and new.gpus_per_node != cluster.gpus_per_node:
        new.inter_node_bandwidth_gbits_per_s = bw / cluster.gpus_per_node * new.gpus_per_node
    return new


#: How other tools' configuration files and published tables name the shipped GPU kinds: a
#: name is read as words (letters and digits; ``"NVIDIA DGX H100 SXM5 80GB HBM3"``), the
#: vendor and system words (:data:`_GPU_NAME_NOISE`) dropped; exactly one family word must
#: remain (the key here), and the name maps to the one shipped variant of that family whose
#: required words it has and which carries every other word (its form factor, memory size
#: and type, power, NVLink domain). Each variant is ``(kind, words it carries, words it
#: requires)``. Not aliased on purpose: other variants of a family (H100 PCIe / NVL, an H100
#: at 500 W without its 96 GB, A100 40 GB, GB200 NVL36 ...: other memory, bandwidth, power or
#: NVLink domain) keep their name and are refused by name.
_GPU_FAMILIES: dict[str, tuple[tuple[str, set[str], set[str]], ...]] = {
    "a100": (("A100-SXM4-80GB", {"sxm", "sxm4", "80gb", "hbm2e", "400w"}, set()),),
    "a800": (("A800-SXM4-80GB", {"sxm", "sxm4", "80gb", "hbm2e", "400w"}, set()),),
    "h100": (("H100-SXM5-80GB", {"sxm", "sxm5", "80gb", "hbm3", "700w"}, set()),
             # Meta's Grand Teton H100 (torchtitan's benchmarks): named by its 96 GB and 500 W
             ("H100-96GB-HBM2e-500W", {"sxm", "sxm5", "96gb", "hbm2e", "500w", "grand", "teton"},
              {"96gb", "500w"})),
    "h800": (("H800-SXM5-80GB", {"sxm", "sxm5", "80gb", "hbm3", "700w"}, set()),),
    # the 96 GB HBM3 H20 (HGX H20); its 141 GB HBM3e successor keeps its name (refused)
    "h20": (("H20-96GB", {"sxm", "96gb", "hbm3", "400w"}, set()),),
    "h200": (("H200-SXM-141GB", {"sxm", "sxm5", "141gb", "hbm3e", "700w"}, set()),),
    # the 96 GB HBM3 superchip; the 144 GB HBM3e one keeps its name (refused)
    "gh200": (("GH200-96GB", {"96gb", "hbm3", "grace", "hopper", "superchip"}, set()),),
    # 192 GB is the B200's physical HBM, 180 GB what it exposes; HGX B200 boards take SXM6 modules
    "b200": (("B200-180GB", {"sxm", "sxm6", "180gb", "192gb", "hbm3e", "1000w"}, set()),),
    # HGX B300 (Blackwell Ultra, 8 GPUs per board); GB300 racks are another kind (refused)
    "b300": (("B300-288GB", {"sxm", "288gb", "hbm3e", "ultra", "blackwell"}, set()),),
    # GB200 is the Grace Blackwell superchip itself; NVL72 its rack's NVLink domain
    "gb200": (("GB200-NVL72", {"nvl72", "186gb", "hbm3e", "1200w", "grace", "blackwell",
                               "superchip", "rack"}, set()),),
}


_GPU_NAME_NOISE = {"nvidia", "tesla", "dgx", "hgx", "tensor", "core", "gpu", "gpus"}


#: Words a parenthesis after a GPU name may hold and still only describe the machine (with
#: small counts and the name's own family): "(4 GPUs per compute tray)", "(HGX, 8 per node)".
_GPU_DESCRIPTIVE = _GPU_NAME_NOISE | {
    "per", "compute", "tray", "trays", "node", "nodes", "server", "servers", "system", "board",
    "baseboard", "reference", "design", "rack", "racks", "of", "the", "a", "in", "each", "with",
    "x", "and", "cluster", "platform"}


@dataclass
class ClusterConfig:
    """The GPUs and the network between them."""

    gpu: str = described_field("A100-SXM4-80GB", "", "GPU kind; selects the profile store", choices=GPU_KINDS,
                  check_choices=False)  # another kind is fine with a profile_path (validate)
    gpus_per_node: int = described_field(8, "GPUs", "GPUs in one node: the NVLink domain (8 on HGX/DGX "
                            "boards, 72 for a GB200 NVL72 rack)", bounds=BOUNDS["gpus_per_node"])
    intra_node_bandwidth_gbytes_per_s: float | None = described_field(
        None, "GB/s", "Per-GPU NVLink bandwidth inside a node, one direction; empty means "
        "the collective times measured in the GPU's profile", bounds=BOUNDS["intra_bw"]
    )
    inter_node_bandwidth_gbits_per_s: float | None = described_field(
        None, "Gb/s", "Network bandwidth per node (all NICs of the node together; a GB200 NVL72 "
        "rack with one 400 Gb/s NIC per GPU: 72 x 400 = 28,800); empty means the GPU's reference "
        "node, one NIC per GPU as its DGX/HGX design has (A100 200 Gb/s, H100, H200, B200 and "
        "GB200 400 Gb/s per GPU)", bounds=BOUNDS["inter_bw"]
    )
    profile_path: str | None = described_field(
        None, "", "Profile store to use instead of the shipped one for this GPU kind", path=True
    )
    memory_reserve_fraction: float = described_field(
        0.1, "", "The planner's margin, a share of each GPU's memory: a plan fits when its "
        "modelled whole process (tensors, workspaces, allocator reserve, CUDA context, NCCL "
        "buffers) needs at most the capacity, and is tight when it needs more than (1 - this) "
        "of it; the margin takes no memory away",
        min=0.0, max=0.9)


@dataclass
class CostConfig:
    """What the training run costs."""

    price_per_gpu_hour_usd: float = described_field(2.0, "USD/GPU-hour", "Price of one GPU for one hour",
                                       bounds=BOUNDS["price"])
    training_tokens: float = described_field(300e9, "tokens", "Tokens to train on (token budget)",
                                bounds=BOUNDS["tokens"])
    price_per_kwh_usd: float = described_field(
        0.08, "USD/kWh", "Price of electricity (the energy of the run, core.sim.energy); default the "
        "US average industrial price of 2023, about 8 cents (EIA, Electric Power Monthly, "
        "Table 5.3)", min=0.0, max=100.0)
    power_usage_effectiveness: float = described_field(
        1.1, "", "Facility energy over IT energy (PUE: cooling, power conversion); default 1.10, "
        "the fleet-wide figure hyperscale operators report (Google 2024 Environmental Report, "
        "2023 fleet PUE 1.10); 1 counts the machines only", min=1.0, max=5.0)


#: Unexpected interruptions of the Llama 3 405B pre-training run per GPU-hour: 419 in 54 days
#: on 16,384 H100 GPUs (Dubey et al. 2024, "The Llama 3 Herd of Models", Sec. 3.3.4 and
#: Table 5): 419 / (54 * 24 * 16,384) = 1.97e-5 per GPU-hour, 3.79e-3 per 8-GPU node-day;
#: at 16,384 GPUs one interruption every 3.1 hours. The 47 planned interruptions (maintenance,
#: firmware) are left out: a job schedules them.
LLAMA3_FAILURES_PER_GPU_HOUR = 419 / (54 * 24 * 16_384)

#: ``ReliabilityConfig.checkpoint_interval_iterations`` at its maximum: no checkpoint at all
#: (no save, not even at the end; a failure restarts the run from its start), what a
#: Megatron-LM launch without ``--save`` and a Megatron-Bridge run_config.yaml with
#: ``checkpoint.save: null`` import as (Megatron-LM saves only if ``args.save``). One less is
#: an interval beyond any run: no periodic save, one at the end (``--save-interval 0``).
NO_CHECKPOINT_INTERVAL = 2 ** 40


@dataclass
class ReliabilityConfig:
    """Failures, restarts and checkpoints of a long run (:mod:`core.sim.goodput`, docs/goodput.md).

    Optional in a session file: a file without it takes these defaults, each with its source.
    Failures form a Poisson process whose rate grows with the GPUs of the job (the per-GPU rate
    times the world size): Kokolis et al. 2024 ("Revisiting Reliability in Large-Scale Machine
    Learning Research Clusters", arXiv 2410.21680) measure the effective training time ratio
    falling with job size on Meta's clusters in this way.
    """

    failure_rate_per_gpu_hour: float = described_field(
        LLAMA3_FAILURES_PER_GPU_HOUR, "per GPU-hour",
        "Job interruptions per GPU-hour (a job of N GPUs fails N times as often); per node-day "
        "it is this times 24 times the GPUs per node. Default: Llama 3 405B's 419 unexpected "
        "interruptions in 54 days on 16,384 H100s (Dubey et al. 2024, Sec. 3.3.4), 1.97e-5, "
        "one interruption every 3.1 hours at that size; 0 means no failures", min=0.0, max=1.0)
    restart_time_s: float = described_field(
        600.0, "s", "Time from an interruption to training again: rescheduling and replacing the "
        "node, starting the processes, NCCL initialisation, loading the last checkpoint and "
        "warming up. Default 10 minutes, an assumption of this order for jobs of thousands of "
        "GPUs (no published figure for Llama 3's); failures may strike during it too",
        min=0.0, max=7 * 86400.0)
    checkpoint_write_gbytes_per_s_per_node: float = described_field(
        1.0, "GB/s", "Sustained checkpoint write bandwidth of one node (host: the machine with "
        "its storage link; a GB200 NVL72 compute tray of 4 GPUs, not the 72-GPU rack) to the "
        "storage system. "
        "Default 1 GB/s: Llama 3's Tectonic storage sustains 2 TB/s for 16,384 GPUs, 2,048 "
        "nodes (Dubey et al. 2024, Sec. 3.1.1)", min=1e-3, max=1e4)
    async_save: bool = described_field(
        False, "", "Asynchronous checkpointing (Megatron-LM --async-save, PyTorch DCP async_save): "
        "training stalls only while the state is copied to host memory and the write goes on "
        "in the background. Default false, Megatron-LM's default")
    host_copy_gbytes_per_s_per_gpu: float = described_field(
        25.0, "GB/s", "Device-to-host copy bandwidth of one GPU, the stall of an asynchronous "
        "save. Default 25 GB/s: what a PCIe Gen4 x16 link moves in practice (32 GB/s nominal; "
        "Gen5 on H100 doubles it)", min=0.1, max=1e4)
    checkpoint_interval_iterations: int | None = described_field(
        None, "iterations", "Iterations between checkpoints (Megatron-LM --save-interval); empty "
        "means the optimum of Young (1974) and Daly (2006) from the failure rate and the "
        "checkpoint's cost; 1,099,511,627,776 (2^40, the largest) means no checkpoint at all "
        "(Megatron-LM without --save)", min=1, max=NO_CHECKPOINT_INTERVAL)


def gpu_kind(name: str) -> str:
    """Map a GPU name used by other tools (``"A100"``, ``"DGX-H100"``, ``"H100 SXM5 80GB
    HBM3"``, ``"GB200 (NVL72)"``) to a shipped GPU kind (:data:`_GPU_FAMILIES`); a name that
    names another variant, or no shipped family, is returned unchanged (the caller's
    validation refuses it by name). A parenthesis that only describes the machine (``"GB200
    NVL72 (4 GPUs per compute tray)"``: no memory, power, form factor, memory type or GPU
    family in it) is set aside when the name does not map with it."""
    if name in GPU_KINDS:
        return name
    kind = _gpu_kind_words(name)
    if kind != name or "(" not in name:
        return kind
    bare = re.sub(r"\([^()]*\)", " ", name)
    outer = set(re.findall(r"[a-z0-9]+", bare.lower())) & set(_GPU_FAMILIES)
    for part in re.findall(r"\(([^()]*)\)", name):
        words = re.findall(r"[a-z0-9]+", part.lower())
        if not all(w in _GPU_DESCRIPTIVE or w in outer or (w.isdigit() and len(w) <= 3)
                   for w in words):
            return name  # the parenthesis may name a variant (or another GPU): never set aside
    kind = _gpu_kind_words(bare)
    return kind if kind in GPU_KINDS else name


def _gpu_kind_words(name: str) -> str:
    """:func:`gpu_kind` on the name's words (parentheses read as words)."""
    # "80 GB", "700 W", "NVL 72", "NVL-72" are one word each, as "80GB", "700W", "NVL72"
    text = re.sub(r"(\d)[\s-]+(gb|w)\b", r"\1\2", name.lower())
    text = re.sub(r"\bnvl[\s-]+(\d+)\b", r"nvl\1", text)
    # a count of GPUs in a system name is not a variant: "HGX H100 8-GPU", "8x H100"
    text = re.sub(r"\b\d{1,3}\s*-?\s*gpus?\b|\b\d{1,3}\s*x\b(?=\s*[a-z])", " ", text)
    words = [w for w in re.findall(r"[a-z0-9]+", text) if w not in _GPU_NAME_NOISE]
    families = sorted({w for w in words if w in _GPU_FAMILIES})  # a family named twice is one
    if len(families) != 1:
        return name
    rest = {w for w in words if w != families[0]}
    kinds = [kind for kind, carried, required in _GPU_FAMILIES[families[0]]
             if required <= rest and rest <= carried]
    return kinds[0] if len(kinds) == 1 else name

