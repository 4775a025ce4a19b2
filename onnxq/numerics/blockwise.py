"""Block-wise 4-bit (or 8-bit) weights along K, in the layout of com.microsoft MatMulNBits (and of ONNX's
DequantizeLinear with block_size): value = (code - zero_point) * scale, one scale (and zero point) per block of
`block_size` values of one output column.

Codes are unsigned, 0..2^bits - 1. Symmetric ("int4"): zero point 2^(bits-1) (8; 128 at 8 bits) and no zero-point
tensor (MatMulNBits' default); the block's largest-magnitude value m gets scale m / -2^(bits-1), so it lands
exactly on code 0 and the opposite side keeps one step fewer — all levels used (onnxruntime's MLAS quantizer does
the same). Asymmetric ("uint4"): scale and zero point from the block's [min(w, 0), max(w, 0)]. 8 bits is the
middle tier of mixed precision (fallback.py): the same layout, a byte per code.

Clip search: per block, the range is shrunk by each ratio of CLIP_RATIOS and the one with the least reconstruction
error kept — error weighted per input channel k by `importance` when given (the mean square of the activation
feeding k: E[(x · (w - ŵ))²] summed over independent channels), else plain squared error.

Scales lie on float16's grid wherever float16 holds them as normal numbers (2^-14 … 65504 in magnitude): rounded
there (relative 2^-11, a thousandth of a 4-bit step) before any code is chosen, so that a file can store them in two
bytes instead of four without changing one value (passes.forms.blockwise; GGUF's Q4_0 stores its scales so).
With a scale grid (ScaleSearch.grid), each output channel's scales then move onto an 8-bit grid of their own
(numerics.scale_grid), a byte each in the file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from onnxq.numerics.scale_grid import NEIGHBOURS, ScaleGrid, grid_of, worth_a_grid

__all__ = ["BlockQuantized", "CLIP_RATIOS", "ScaleSearch", "quantize_blockwise", "block_scales", "grid_scales",
           "fit_on_grid", "dequantize_blockwise",
           "pack_nibbles", "unpack_nibbles", "pack_codes", "symmetric_zero_point", "SYMMETRIC_ZERO_POINT", "BITS",
           "by_rows", "on_half_grid", "half_exact"]

BITS = (4, 8)
SYMMETRIC_ZERO_POINT = 8  # at 4 bits


def symmetric_zero_point(bits: int) -> int:
    return 1 << (bits - 1)

# float16's normal magnitudes: a scale there keeps float32's relative precision within 2^-11 once rounded.
_HALF_NORMAL = (float(np.finfo(np.float16).tiny), float(np.finfo(np.float16).max))


def on_half_grid(scales: np.ndarray) -> np.ndarray:
    """float32 scales rounded to float16's grid where float16 holds them as normal numbers; the rest as they are."""
    scales = np.asarray(scales, np.float32)
    magnitude = np.abs(scales)
    inside = (magnitude >= _HALF_NORMAL[0]) & (magnitude <= _HALF_NORMAL[1])
    with np.errstate(over="ignore"):  # the values beyond float16's range are not taken
        return np.where(inside, scales.astype(np.float16).astype(np.float32), scales)


def half_exact(scales: np.ndarray) -> bool:
    """Whether float16 holds every scale exactly (none rounded off its grid: subnormal or beyond float16's range)."""
    with np.errstate(over="ignore"):  # beyond its range: inf, unequal
        return bool(np.array_equal(np.asarray(scales, np.float16).astype(np.float32), scales))


# 1.0 (no clipping) down to 0.7 in steps of 0.025.
CLIP_RATIOS = tuple(float(r) for r in np.round(np.arange(1.0, 0.6999, -0.025), 3))


@dataclasses.dataclass(frozen=True)
class ScaleSearch:
    """How block scales are chosen: the clip ratios tried per block, and whether the scales then move onto an 8-bit
    grid per output channel (numerics.scale_grid; a byte each in the file)."""

    ratios: tuple[float, ...] = CLIP_RATIOS
    grid: bool = False

    def for_weight(self, k: int, n: int, block_size: int) -> ScaleSearch:
        """This search for a weight [K, N]: without the grid where it would not make the file smaller (decided for
        the whole weight, whatever slices of its channels are quantized at a time)."""
        if self.grid and not worth_a_grid(n, -(-k // block_size)):
            return dataclasses.replace(self, grid=False)
        return self


@dataclasses.dataclass(frozen=True)
class BlockQuantized:
    """A [K, N] weight as N columns of ceil(K / block_size) blocks; K is padded with zeros to whole blocks."""

    codes: np.ndarray  # uint8 [N, n_blocks, block_size], values 0..2^bits - 1
    scales: np.ndarray  # float32 [N, n_blocks]
    zero_points: np.ndarray | None  # uint8 [N, n_blocks]; None: symmetric, zero point 2^(bits-1)
    k: int
    block_size: int
    bits: int = 4
    scale_grid: ScaleGrid | None = None  # the grid every scale lies on (ScaleSearch.grid), by output channel

    @property
    def n(self) -> int:
        return self.codes.shape[0]

    @property
    def n_blocks(self) -> int:
        return self.codes.shape[1]


# Output channels of a weight worked on at a time: each is quantized on its own, so the result is the same, and the
# clip search's temporaries (several copies of the rows) stay bounded — SmolLM2's 49152 × 576 tied table took 200 MB
# a ratio whole.
_ROW_SLICE_BYTES = 16 << 20


def by_rows(quantize: Callable[[np.ndarray], BlockQuantized], weight: np.ndarray,
            row_bytes: int) -> BlockQuantized:
    """quantize(weight [K, N]) over slices of its N output channels of at most _ROW_SLICE_BYTES (row_bytes each),
    joined: for quantizers that treat every output channel on its own."""
    k, n = weight.shape
    rows = max(1, _ROW_SLICE_BYTES // max(row_bytes, 1))
    if n <= rows:
        return quantize(weight)
    parts = [quantize(weight[:, start:start + rows]) for start in range(0, n, rows)]
    zero_points = None if parts[0].zero_points is None else np.concatenate([p.zero_points for p in parts])
    grids = [p.scale_grid for p in parts]
    grid = None if any(g is None for g in grids) else ScaleGrid.joined(grids)  # else stored as the scales are
    return BlockQuantized(np.concatenate([p.codes for p in parts]), np.concatenate([p.scales for p in parts]),
                          zero_points, k, parts[0].block_size, parts[0].bits, grid)


def quantize_blockwise(weight: np.ndarray, block_size: int, symmetric: bool, importance: np.ndarray | None = None,
                       clip_ratios: tuple[float, ...] = CLIP_RATIOS, bits: int = 4,
                       scale_grid: bool = False) -> BlockQuantized:
    """weight: float [K, N] (MatMul's B). importance: [K] non-negative weights of the error per input channel.
    scale_grid: the scales on an 8-bit grid per output channel (ScaleSearch.grid)."""
    if block_size < 16 or block_size & (block_size - 1):
        raise ValueError(f"block_size must be a power of two >= 16, got {block_size}")
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    search = ScaleSearch(tuple(clip_ratios), scale_grid).for_weight(*weight.shape, block_size)
    return by_rows(lambda rows: _quantize_rows(rows, block_size, symmetric, importance, search, bits), weight,
                   4 * weight.shape[0])


def _quantize_rows(weight: np.ndarray, block_size: int, symmetric: bool, importance: np.ndarray | None,
                   search: ScaleSearch, bits: int) -> BlockQuantized:
    k, n = weight.shape
    n_blocks = -(-k // block_size)
    blocks = np.zeros((n, n_blocks * block_size), np.float32)
    blocks[:, :k] = weight.T
    blocks = blocks.reshape(n, n_blocks, block_size)
    channel_weight = None
    if importance is not None:
        padded = np.zeros(n_blocks * block_size, np.float32)
        padded[:k] = np.maximum(np.asarray(importance, np.float32), 0.0)
        channel_weight = padded.reshape(1, n_blocks, block_size)
    scales, zero_points, grid = grid_scales(blocks, symmetric, channel_weight, search, bits)
    codes = _codes(blocks, scales, symmetric_zero_point(bits) if symmetric else zero_points, bits)
    return BlockQuantized(codes, scales, zero_points, k, block_size, bits, grid)


def block_scales(blocks: np.ndarray, symmetric: bool, channel_weight: np.ndarray | None = None,
                 clip_ratios: tuple[float, ...] = CLIP_RATIOS, bits: int = 4) -> tuple[np.ndarray, np.ndarray | None]:
    """Scales [N, n_blocks] and zero points (None when symmetric) of blocks [N, n_blocks, block_size] by the clip
    search; channel_weight broadcasts against blocks (importance per input channel)."""
    if symmetric:
        return _symmetric_scales(blocks, clip_ratios, channel_weight, bits), None
    return _asymmetric_scales(blocks, clip_ratios, channel_weight, bits)


def grid_scales(blocks: np.ndarray, symmetric: bool, channel_weight: np.ndarray | None, search: ScaleSearch,
                bits: int) -> tuple[np.ndarray, np.ndarray | None, ScaleGrid | None]:
    """block_scales by the search's ratios, then — search.grid — each output channel's scales on a grid spanning
    them (fit_on_grid); the grid None where there is none (not asked for, or float16 cannot hold it)."""
    scales, zero_points = block_scales(blocks, symmetric, channel_weight, search.ratios, bits)
    grid = grid_of(scales, np.abs(blocks).max(axis=-1) > 0) if search.grid else None
    if grid is None:
        return scales, zero_points, None
    return (*fit_on_grid(blocks, (scales, zero_points), grid, channel_weight, bits), grid)


def fit_on_grid(blocks: np.ndarray, chosen: tuple[np.ndarray, np.ndarray | None], grid: ScaleGrid,
                channel_weight: np.ndarray | None, bits: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Scales on the grid (and zero points, asymmetric) of blocks [N, n_blocks, block_size]: per block, the grid
    value of least error among those nearest the scale chosen (chosen: scales and zero points, None symmetric);
    asymmetric blocks try their zero point and the one that puts their low on a code at the new scale."""
    scales, zero_points = chosen
    if zero_points is None:
        options = [(offset, None) for offset in NEIGHBOURS]
    else:
        low = np.minimum(blocks.min(axis=-1), 0.0)
        options = [(offset, refit) for offset in NEIGHBOURS for refit in (False, True)]

    def params_for(option):
        offset, refit = option
        candidate = grid.near(scales, offset)
        if zero_points is None:
            return candidate, np.float32(symmetric_zero_point(bits))
        if not refit:
            return candidate, zero_points.astype(np.float32)
        return candidate, np.clip(np.rint(-low / candidate), 0, (1 << bits) - 1).astype(np.float32)

    best_scales, best_zero_points = _search(blocks, options, channel_weight, bits, params_for)
    return best_scales, None if zero_points is None else best_zero_points.astype(np.uint8)


def dequantize_blockwise(quantized: BlockQuantized) -> np.ndarray:
    """float32 [K, N]: (code - zero point) * scale, block by block."""
    zero_point = (np.float32(symmetric_zero_point(quantized.bits)) if quantized.zero_points is None
                  else quantized.zero_points[..., None].astype(np.float32))
    values = (quantized.codes.astype(np.float32) - zero_point) * quantized.scales[..., None]
    return np.ascontiguousarray(values.reshape(quantized.n, -1)[:, :quantized.k].T)


def pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """Two 4-bit codes per byte along the last axis, the first in the low nibble (MatMulNBits, ONNX int4)."""
    if codes.shape[-1] % 2:
        codes = np.concatenate([codes, np.zeros((*codes.shape[:-1], 1), codes.dtype)], axis=-1)
    return (codes[..., 0::2] & 0x0F | (codes[..., 1::2] & 0x0F) << 4).astype(np.uint8)


def unpack_nibbles(packed: np.ndarray, count: int) -> np.ndarray:
    codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(*packed.shape[:-1], -1)
    return codes[..., :count]


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """MatMulNBits / GatherBlockQuantized storage: nibbles at 4 bits, a byte per code at 8."""
    return pack_nibbles(codes) if bits == 4 else np.ascontiguousarray(codes, np.uint8)


def _codes(blocks: np.ndarray, scales: np.ndarray, zero_point, bits: int) -> np.ndarray:
    zero_point = np.asarray(zero_point, np.float32)
    if zero_point.ndim:
        zero_point = zero_point[..., None]
    q = np.rint(blocks / scales[..., None]) + zero_point
    return np.clip(q, 0, (1 << bits) - 1).astype(np.uint8)


def _error(blocks, scales, zero_point, channel_weight, bits) -> np.ndarray:
    """Per-block (importance-weighted) squared reconstruction error."""
    zp = zero_point if np.ndim(zero_point) == 0 else zero_point[..., None]
    codes = np.clip(np.rint(blocks / scales[..., None]) + zp, 0, (1 << bits) - 1)
    diff = (codes - zp) * scales[..., None] - blocks
    diff *= diff
    if channel_weight is not None:
        diff *= channel_weight
    return diff.sum(axis=-1)


def _search(blocks, options, channel_weight, bits, params_for):
    """The option (a clip ratio, a grid neighbour) of least error per block; params_for(option) gives (scales, zero
    points) for every block."""
    best_scales, best_zero_points = params_for(options[0])
    best_error = _error(blocks, best_scales, best_zero_points, channel_weight, bits)
    for option in options[1:]:
        scales, zero_points = params_for(option)
        error = _error(blocks, scales, zero_points, channel_weight, bits)
        better = error < best_error
        best_error = np.where(better, error, best_error)
        best_scales = np.where(better, scales, best_scales)
        if np.ndim(zero_points):
            best_zero_points = np.where(better, zero_points, best_zero_points)
    return best_scales.astype(np.float32), best_zero_points


def _symmetric_scales(blocks, clip_ratios, channel_weight, bits) -> np.ndarray:
    index = np.abs(blocks).argmax(axis=-1)[..., None]
    extreme = np.take_along_axis(blocks, index, axis=-1)[..., 0]
    zero_point = np.float32(symmetric_zero_point(bits))
    # An all-zero block: any scale gives the zero point's code → 0; 1 avoids dividing by zero.
    base = np.where(extreme == 0, -zero_point, extreme).astype(np.float32) / -zero_point

    def params_for(ratio: float):
        # A block whose extreme is a few subnormals: extreme / 8 underflows to 0; 1 quantizes it to 0 like a zero
        # block (within half a step), where a zero scale would divide by zero.
        scale = on_half_grid(base * np.float32(ratio))
        return np.where(scale == 0, np.float32(1.0), scale), zero_point

    scales, _ = _search(blocks, clip_ratios, channel_weight, bits, params_for)
    return scales


def _asymmetric_scales(blocks, clip_ratios, channel_weight, bits) -> tuple[np.ndarray, np.ndarray]:
    lo = np.minimum(blocks.min(axis=-1), 0.0)
    hi = np.maximum(blocks.max(axis=-1), 0.0)
    top = np.float32((1 << bits) - 1)

    def params_for(ratio: float):
        low, high = lo * np.float32(ratio), hi * np.float32(ratio)
        scale = on_half_grid((high - low) / top)
        scale = np.where(scale == 0, np.float32(1.0), scale)
        zero_point = np.clip(np.rint(-low / scale), 0, top).astype(np.float32)
        return scale, zero_point

    scales, zero_points = _search(blocks, clip_ratios, channel_weight, bits, params_for)
    return scales, zero_points.astype(np.uint8)
