"""`Network.preset(name, shape=None, calibration='measured')`: the networks of real systems, from public figures.

Every bandwidth is bytes per second in one direction of one link (or port). Latencies are per hop: about
1 us on TPU ICI; NVLink and InfiniBand latencies are order-of-magnitude figures for a small message through
the switch, not measured here.

Each builder gives the hardware's links (`calibration='ideal'`: link rates, no cost besides the wire, the
textbook forms); `calibration='measured'` (the default) adds the `Costs` fitted to published measurements
(`MEASURED`, each with its source), so that a preset's times are those a user of the real system sees.

Every preset also carries its device's peak rates (`ROOFLINES`: dense bfloat16 FLOP/s, memory bandwidth,
transcendentals per second where published, each with its source), which time local work charged with
`sim.compute` in both calibrations: they are the hardware's peaks, what a roofline model takes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from sim._errors import InvalidArgumentError
from sim.network._costs import FREE, Costs
from sim.network._network import Network, _check_shape
from sim.network._roofline import Roofline

# NVLink SHARP (NVLS) on H100: nccl-tests all_reduce_perf on 8 GPUs peaks at busbw ~480 GB/s, algbw ~275 GB/s,
# at large sizes (S. Jeaugey, NVIDIA, github.com/NVIDIA/nccl-tests/issues/212; the GTC 2024 talk S62129 figure
# quoted in github.com/NVIDIA/nccl/issues/1374). With the switch adding as fast as a port takes in, an 'in_network'
# psum moves n bytes through each port in n / rate: algbw is the rate, so the measured rate of each port's
# reduction is 275 GB/s (busbw 2 (8 - 1)/8 x 275 = 481 GB/s); the ideal is the port's 450 GB/s (rate None).
_NVLS_H100_BYTES_PER_S = 275e9
CALIBRATIONS = ("measured", "ideal")

_ICI_HOP_S = 1e-6  # "about 1 us per hop" on ICI: How to Scale Your Model (Austin et al., 2025), "Rooflines"/TPUs
# Every TPU preset is multipath: a transfer is split over the torus's minimal paths (both ways round a ring at a
# half-way tie, every dimension order), as ICI spreads traffic over the links of a slice; How to Scale Your
# Model's ICI forms likewise count both directions of every link (W_bidi) for traffic that can use them.


def _tpu_v4p(shape: tuple[int, ...]) -> Network:
    # TPU v4: 3-D torus, 4.5e10 B/s one way per ICI link; slices wrap around on axes that are multiples of 4
    # (the optical circuit switches close a ring on each full 4-chip cube face). Sources: cloud.google.com/tpu/
    # docs/v4 and How to Scale Your Model, "How to Think About TPUs" (ICI bandwidth table, wraparound rule).
    return Network.torus(shape, tuple(s % 4 == 0 for s in shape), _ICI_HOP_S, 4.5e10, multipath=True)


def _tpu_v5p(shape: tuple[int, ...]) -> Network:
    # TPU v5p: 3-D torus, 9e10 B/s one way per ICI link (twice v4p); the same cube-and-OCS construction, so
    # axes that are multiples of 4 wrap around. Sources: cloud.google.com/tpu/docs/v5p and How to Scale Your
    # Model, "How to Think About TPUs".
    return Network.torus(shape, tuple(s % 4 == 0 for s in shape), _ICI_HOP_S, 9e10, multipath=True)


def _tpu_v5e(shape: tuple[int, ...]) -> Network:
    # TPU v5e: 2-D torus (up to 16x16), 4.5e10 B/s one way per ICI link; only a full axis of 16 wraps around.
    # Sources: cloud.google.com/tpu/docs/v5e and How to Scale Your Model, "How to Think About TPUs".
    return Network.torus(shape, tuple(s == 16 for s in shape), _ICI_HOP_S, 4.5e10, multipath=True)


def _tpu_v6e(shape: tuple[int, ...]) -> Network:
    # TPU v6e (Trillium): 2-D torus (up to 16x16), 9e10 B/s one way per ICI link; a full axis of 16 wraps
    # around, as on v5e. Sources: cloud.google.com/tpu/docs/v6e and How to Scale Your Model.
    return Network.torus(shape, tuple(s == 16 for s in shape), _ICI_HOP_S, 9e10, multipath=True)


def _h100_nvlink(shape: tuple[int, ...]) -> Network:
    # H100 SXM: NVLink 4, 18 links of 25 GB/s per direction = 450 GB/s per direction per GPU, through
    # NVSwitch (non-blocking): a switch topology. Source: NVIDIA H100 Tensor Core GPU Architecture whitepaper
    # (2022), "NVLink"; nvidia.com/en-us/data-center/nvlink/.
    return replace(Network.switch(2e-6, 450e9), switch_reduces=True,
                   switch_reduction_bytes_per_s=_NVLS_H100_BYTES_PER_S)


def _h100_ib(shape: tuple[int, ...]) -> Network:
    # DGX H100: 8 GPUs per node on NVSwitch (450 GB/s per direction per GPU, as h100-nvlink), nodes joined by
    # one 400 Gb/s (50 GB/s per direction) ConnectX-7 InfiniBand NIC per GPU. Source: NVIDIA DGX H100 user
    # guide, "Hardware overview" (8x ConnectX-7, 400 Gb/s each); NDR InfiniBand switch latency ~ a few us.
    # The fabric is DGX SuperPOD's: scalable units of 32 nodes, rail-optimized (NIC r of each node of a unit on
    # leaf r), leaves joined by spines non-blocking (as many leaf-spine cables as node-leaf ones). Source: NVIDIA
    # DGX SuperPOD Reference Architecture featuring DGX H100 Systems (RA-11333-001), "Compute Fabric"; docs.
    # nvidia.com/dgx-superpod/reference-architecture-scalable-infrastructure-h100/. The spine's two extra switch
    # traversals are well inside the order-of-magnitude 5 us, so they add no latency of their own.
    # The NVSwitch reduces as h100-nvlink's does (NVLS); the InfiniBand switch reduces too (SHARP, NDR Quantum-2
    # switches), at its ports' 50 GB/s.
    return replace(Network.hierarchical(shape[1], shape[0], 2e-6, 450e9, 5e-6, 50e9, leaf_size=32, rails=True),
                   switch_reduces=True, switch_reduction_bytes_per_s=_NVLS_H100_BYTES_PER_S)


def _gb200_nvl72(shape: tuple[int, ...]) -> Network:
    # GB200 NVL72: 72 Blackwell GPUs in one NVLink 5 domain, 1.8 TB/s bidirectional = 900 GB/s per direction
    # per GPU, through NVLink switch trays (non-blocking): a switch topology. Source: nvidia.com/en-us/
    # data-center/gb200-nvl72/ ("130 TB/s" aggregate = 72 x 1.8 TB/s).
    # The NVLink switch trays reduce (NVLink SHARP); no measured rate is set, so they add at the port rate.
    return replace(Network.switch(2e-6, 900e9), switch_reduces=True)


def _a100_hdr200(shape: tuple[int, ...]) -> Network:
    # A100 SXM nodes of 4 (HGX A100 4-GPU, e.g. DKRZ Levante's GPU nodes): NVLink 3, 12 links of 25 GB/s per
    # direction = 300 GB/s per direction per GPU inside the node (on the 4-GPU board the links go straight to
    # the 3 peers, 100 GB/s per pair; the node's switch here gives a GPU its 300 GB/s towards all of them
    # at once, as an all-to-all uses it); nodes joined by HDR200 InfiniBand, 200 Gb/s = 25 GB/s per direction,
    # one NIC per GPU. Sources: NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), "NVLink";
    # NVIDIA Quantum HDR 200 Gb/s InfiniBand; openxla/xla#46982 (the Levante setting).
    return Network.hierarchical(shape[1], shape[0], 2e-6, 300e9, 5e-6, 25e9)


# name: (builder, default shape, shape rank, what the shape means)
PRESETS: dict[str, tuple[Callable[[tuple[int, ...]], Network], tuple[int, ...], int, str]] = {
    "tpu-v4p": (_tpu_v4p, (4, 4, 4), 3, "a 3-D torus shape"),
    "tpu-v5p": (_tpu_v5p, (4, 4, 4), 3, "a 3-D torus shape"),
    "tpu-v5e": (_tpu_v5e, (16, 16), 2, "a 2-D torus shape"),
    "tpu-v6e": (_tpu_v6e, (16, 16), 2, "a 2-D torus shape"),
    "h100-nvlink": (_h100_nvlink, (8,), 1, "(GPUs,) in the node"),
    "h100-ib": (_h100_ib, (2, 8), 2, "(nodes, GPUs per node)"),
    "gb200-nvl72": (_gb200_nvl72, (72,), 1, "(GPUs,) in the NVLink domain"),
    "a100-hdr200": (_a100_hdr200, (4, 4), 2, "(nodes, GPUs per node)"),
}

# ICI's share of the link rate, fitted to How to Scale Your Model's measured TPU v5e AllGather ("Sharded
# Matrices": bf16[2048, 8192] over Y of an 8x4 slice, 680 us measured against the 560 us line model); no
# other ICI generation is published, so the same share is taken for all of them.
_ICI_MEASURED = Costs(efficiency=0.83)
# NCCL's protocol overhead on NVLink, "~20%": 370 GB/s effective of the 450 GB/s line rate on H100 (NVIDIA's
# answer in NVIDIA/nccl-tests#212); the same share is taken for InfiniBand and for A100's NVLink 3.
_NCCL_MEASURED = Costs(efficiency=370 / 450)

# The measured calibration's costs per preset (the ideal one has none).
MEASURED: dict[str, Costs] = {
    "tpu-v4p": _ICI_MEASURED,
    "tpu-v5p": _ICI_MEASURED,
    "tpu-v5e": _ICI_MEASURED,
    "tpu-v6e": _ICI_MEASURED,
    "h100-nvlink": _NCCL_MEASURED,
    "h100-ib": _NCCL_MEASURED,
    "gb200-nvl72": _NCCL_MEASURED,
    # jax 0.10.0's XLA issues an NCCL send/recv for every peer slice of a ragged all-to-all, empty ones
    # included, ~12 us each: +625 us from 16 to 64 A100s at fixed traffic (openxla/xla#46982; later XLA
    # skips empty slices: Costs(..., empty_slices='skip')).
    "a100-hdr200": Costs(per_message_s=12e-6, empty_slices="pay", efficiency=0.8),
}


# Each device's peak rates: dense bfloat16 FLOP/s (no sparsity), memory bandwidth, and transcendentals per
# second where published (GPUs: 16 results per clock per SM from the special function units, CUDA C++
# Programming Guide, "Arithmetic Instructions", throughput table, compute capability 8.0 and 9.0).
ROOFLINES: dict[str, Roofline] = {
    # cloud.google.com/tpu/docs/v4: 275 TFLOP/s bf16, HBM2 1,200 GB/s per chip (How to Scale Your Model,
    # "How to Think About TPUs", gives the same 2.75e14 and 1.2e12).
    "tpu-v4p": Roofline(2.75e14, 1.2e12),
    # cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, HBM2e 2,765 GB/s per chip.
    "tpu-v5p": Roofline(4.59e14, 2.765e12),
    # cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, HBM2 819 GB/s per chip.
    "tpu-v5e": Roofline(1.97e14, 8.19e11),
    # cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, HBM 1,640 GB/s per chip.
    "tpu-v6e": Roofline(9.18e14, 1.64e12),
    # H100 SXM5 datasheet (nvidia.com/en-us/data-center/h100/): 1,979 TFLOP/s bf16 with sparsity, so 989.5
    # dense; HBM3 3.35 TB/s. Transcendentals: 132 SMs x 16 per clock x 1.98 GHz boost = 4.18e12 per second.
    "h100-nvlink": Roofline(9.895e14, 3.35e12, 132 * 16 * 1.98e9),
    "h100-ib": Roofline(9.895e14, 3.35e12, 132 * 16 * 1.98e9),
    # GB200 NVL72 (nvidia.com/en-us/data-center/gb200-nvl72/): 360 PFLOP/s FP16/BF16 with sparsity for 72
    # GPUs, so 2.5 PFLOP/s dense per GPU; HBM3e 576 TB/s, 8 TB/s per GPU. No SM count is published.
    "gb200-nvl72": Roofline(2.5e15, 8e12),
    # A100 80GB SXM (A100 datasheet, nvidia.com/en-us/data-center/a100/): 312 TFLOP/s bf16 dense, HBM2e
    # 2,039 GB/s. Transcendentals: 108 SMs x 16 per clock x 1.41 GHz boost = 2.44e12 per second.
    "a100-hdr200": Roofline(3.12e14, 2.039e12, 108 * 16 * 1.41e9),
}


def preset(name: str, shape: tuple[int, ...] | None = None, calibration: str = "measured") -> Network:
    """The network of preset `name` over `shape` (its default when None), calibrated by `calibration`
    ('measured': the costs fitted to published measurements, `MEASURED`; 'ideal': the links alone).

    Raises:
        InvalidArgumentError: an unknown name (the known ones are listed), a shape of the wrong rank or an
            unknown calibration.
    """
    if name not in PRESETS:
        raise InvalidArgumentError(f"preset={name!r} is not a known preset; known presets: {', '.join(PRESETS)}")
    if calibration not in CALIBRATIONS:
        raise InvalidArgumentError(f"calibration={calibration!r} must be 'measured' (fitted to published "
                                   f"measurements) or 'ideal' (the hardware's link rates, no other cost)")
    build, default, rank, meaning = PRESETS[name]
    shape = default if shape is None else _check_shape(shape, "torus")
    if len(shape) != rank:
        count = f"{rank} numbers" if rank > 1 else "one number"
        raise InvalidArgumentError(f"preset={name!r}: shape={tuple(shape)} must be {meaning} ({count})")
    network = replace(build(tuple(shape)), roofline=ROOFLINES[name])
    if network.topology == "switch":  # a switch holds any number of devices; the preset fixes its node
        network = replace(network, shape=tuple(shape))
    if calibration == "ideal":  # the links alone: a switch that reduces adds as fast as its ports take in
        return replace(network, preset_name=name, switch_reduction_bytes_per_s=None)
    return replace(network, preset_name=name, costs=MEASURED.get(name, FREE))
