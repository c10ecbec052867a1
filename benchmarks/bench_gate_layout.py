"""The gate-noise training step's two passes over the features, in the layouts and compilers tried
(issue 41, item 3; not a test; run by hand).

A disentangled step reads the stored training features twice (model.py: the forward scores
s = ctx A q and the backward contraction sum_c coef_c ctx_c), each a batch of U B N small
products (C x k) @ (k x K) with K members per dataset (K = 5 at the gate-noise preset). This
script times the two passes alone, at the preset's shapes (--size gate-noise: U 4, B 2, N 400,
C 999, k 200, K 5, float32; --size small: the phase map's cheaper size), against the same
bandwidth bound as bench_disentangled.py section 4 (2 x the features' bytes over the copy
bandwidth at the same thread count):

    einsum      today's model.py: torch.einsum (dispatched to bmm of (C x k) @ (k x K) per prompt)
    bmm-T       the transposed product (K x k) @ (k x C) per prompt: the member dimension as the
                GEMM's rows, the context tokens as its long dimension
    bmm-T-pad   bmm-T with the members padded with zeros to a multiple of 8 (the kernel's width)
    members     the K members as one (C x k) @ (k x K) GEMM per prompt over all datasets' prompts
                flattened: one bmm of U B N products (the layout's batch of large GEMMs)
    compiled    torch.compile (inductor's C++ backend) of the einsum pair, when a C++ compiler is
                present (the elementwise-product-and-sum form lets inductor fuse the K dot products
                per context row into one loop)

Each variant is checked against einsum in float64 on a reduced copy (max relative difference
<= EQUAL_TOL) before it is timed in float32.

Usage: python benchmarks/bench_gate_layout.py [--size gate-noise|small] [--repeats 5] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable

import torch

from bench_disentangled import copy_bandwidth  # the same bound as section 4 there (run from benchmarks/ or by path)
from stagewise.engine.perf import training_threads

PAD = 8  # bmm-T-pad: members padded to a multiple of this
EQUAL_TOL = 1e-10  # float64 agreement of a variant with einsum (relative to the largest entry)
SIZES = {"gate-noise": dict(U=4, B=2, N=400, C=999, k=200, K=5), "small": dict(U=4, B=2, N=200, C=249, k=50, K=5)}

Passes = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def einsum_pair(ctx: torch.Tensor, key: torch.Tensor, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ctx (U, B, N, C, k), key (U, K, B, N, k), coef (U, K, B, N, C) -> scores (U, K, B, N, C),
    weighted (U, K, B, N, k): model.all_scores' and model.gradients' products."""
    scores = torch.einsum("ubncd,ukbnd->ukbnc", ctx, key)
    weighted = torch.einsum("ukbnc,ubncd->ukbnd", coef, ctx)
    return scores, weighted


def bmm_transposed(ctx: torch.Tensor, key: torch.Tensor, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(K x k) @ (k x C) and (K x C) @ (C x k) per prompt, the members as the GEMM's rows."""
    U, B, N, C, k = ctx.shape
    K = key.shape[1]
    flat = ctx.reshape(U * B * N, C, k)  # (P, C, k) P = U B N prompts
    key_p = key.permute(0, 2, 3, 1, 4).reshape(U * B * N, K, k)  # (P, K, k)
    scores = torch.bmm(key_p, flat.transpose(1, 2))  # (P, K, C)
    coef_p = coef.permute(0, 2, 3, 1, 4).reshape(U * B * N, K, C)  # (P, K, C)
    weighted = torch.bmm(coef_p, flat)  # (P, K, k)
    back = lambda t, last: t.view(U, B, N, K, last).permute(0, 3, 1, 2, 4)  # noqa: E731  (P, K, .) -> (U, K, B, N, .)
    return back(scores, C), back(weighted, k)


def bmm_transposed_padded(ctx: torch.Tensor, key: torch.Tensor, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """bmm-T with the members padded with zero rows to a multiple of PAD (the GEMM kernel's register width)."""
    K = key.shape[1]
    extra = -K % PAD
    if extra == 0:
        return bmm_transposed(ctx, key, coef)
    pad = lambda t: torch.cat([t, t.new_zeros(t.shape[0], extra, *t.shape[2:])], 1)  # noqa: E731  (U, K, ...) -> (U, K + extra, ...)
    scores, weighted = bmm_transposed(ctx, pad(key), pad(coef))
    return scores[:, :K], weighted[:, :K]


def members_gemm(ctx: torch.Tensor, key: torch.Tensor, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(C x k) @ (k x K) per prompt as one bmm over all prompts (members in the GEMM's columns)."""
    U, B, N, C, k = ctx.shape
    K = key.shape[1]
    flat = ctx.reshape(U * B * N, C, k)  # (P, C, k)
    key_p = key.permute(0, 2, 3, 4, 1).reshape(U * B * N, k, K)  # (P, k, K)
    scores = torch.bmm(flat, key_p)  # (P, C, K)
    coef_p = coef.permute(0, 2, 3, 4, 1).reshape(U * B * N, C, K)  # (P, C, K)
    weighted = torch.bmm(coef_p.transpose(1, 2), flat)  # (P, K, k)
    return (scores.view(U, B, N, C, K).permute(0, 4, 1, 2, 3),  # (U, K, B, N, C)
            weighted.view(U, B, N, K, k).permute(0, 3, 1, 2, 4))  # (U, K, B, N, k)


def product_sum_pair(ctx: torch.Tensor, key: torch.Tensor, coef: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same products as broadcast multiply-and-sum (what inductor can fuse into loops)."""
    scores = (ctx.unsqueeze(1) * key.unsqueeze(-2)).sum(-1)  # (U, K, B, N, C)
    weighted = (coef.unsqueeze(-1) * ctx.unsqueeze(1)).sum(-2)  # (U, K, B, N, k)
    return scores, weighted


def inputs(shape: dict[str, int], dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    U, B, N, C, k, K = (shape[x] for x in "U B N C k K".split())
    ctx = torch.randn(U, B, N, C, k, generator=g, dtype=dtype)
    key = torch.randn(U, K, B, N, k, generator=g, dtype=dtype)
    coef = torch.randn(U, K, B, N, C, generator=g, dtype=dtype)
    return ctx, key, coef


def max_rel(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> float:
    return max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(a, b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="gate-noise")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    shape = SIZES[args.size]
    threads = int(os.environ.get("STAGEWISE_THREADS", torch.get_num_threads()))
    variants: dict[str, Passes] = {"einsum": einsum_pair, "bmm-T": bmm_transposed, "bmm-T-pad": bmm_transposed_padded,
                                   "members": members_gemm}
    compiled_note = ""
    try:
        variants["compiled"] = torch.compile(product_sum_pair, dynamic=False)
    except Exception as err:  # noqa: BLE001  (no compiler: say so, time the rest)
        compiled_note = f"torch.compile unavailable: {type(err).__name__}: {err}"
    small = {**shape, "N": 8}
    ref = einsum_pair(*inputs(small, torch.float64))
    rows = []
    bandwidth = copy_bandwidth(threads)
    ctx, key, coef = inputs(shape, torch.float32)
    bound = 2 * ctx.nbytes / bandwidth
    print(f"size {args.size} {shape}, float32, {threads} threads; features {ctx.nbytes / 2**30:.2f} GiB, copy bandwidth "
          f"{bandwidth / 1e9:.1f} GB/s, bound {bound:.3f} s; load {os.getloadavg()[0]:.2f}\n")
    print("| variant | float64 max rel. diff | first call s | s per step pair (best of repeats) | / bound |\n|---|---:|---:|---:|---:|")
    with training_threads(threads):
        for name, fn in variants.items():
            try:
                diff = max_rel(fn(*inputs(small, torch.float64)), ref)
                start = time.perf_counter()
                fn(ctx, key, coef)
                first = time.perf_counter() - start
                times = []
                for _ in range(args.repeats):
                    start = time.perf_counter()
                    fn(ctx, key, coef)
                    times.append(time.perf_counter() - start)
            except Exception as err:  # noqa: BLE001  (a compiler failure is a result to report)
                print(f"| {name} | failed: {type(err).__name__}: {str(err).splitlines()[0][:80]} | | | |")
                continue
            best = min(times)
            ok = "" if diff <= EQUAL_TOL else " (NOT equal)"
            rows.append({"variant": name, "diff": diff, "first_s": first, "best_s": best, "ratio": best / bound})
            print(f"| {name} | {diff:.1e}{ok} | {first:.2f} | {best:.3f} | {best / bound:.2f} |", flush=True)
    if compiled_note:
        print(compiled_note)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"size": args.size, "shape": shape, "threads": threads, "bound_s": bound, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
