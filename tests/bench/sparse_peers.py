#!/usr/bin/env python3
"""Sparse prefill peers for one layer (32 query heads, 8 KV heads, head_dim 128, bf16, causal).

Times, at each length, on random Q/K/V (the kernels' time depends on the index, not the values):
  sdpa-flash      PyTorch SDPA, flash backend, dense: the density-1 reference;
  minference-vs   MInference's vertical-slash path at each --vs (vertical, slash), last 64 queries
                  scored: its per-head loop, last-q scoring and top-k, index conversion
                  (csrc/vertical_slash_index.cu, built here by torch.utils.cpp_extension) and
                  Triton kernel, all run from its own files;
  minference-bs   MInference's block-sparse path (top 100 64-blocks per query block, its
                  mean-pooled index builder, its Triton kernel);
  flashinfer-bs   FlashInfer's BlockSparseAttentionWrapper on that same block-sparse index, the
                  heads flattened into the rows so that every head keeps its own blocks;
  minference-a-shape  MInference's A-shape (StreamingLLM) Triton kernel, minference/ops/
                  streaming_kernel.py's streaming_forward: --a-shape sinks and window (default
                  128 and 4096, the A-shape setting of MInference's own search space), one head a
                  call (all 32 at once overflow its offsets at 1M); density and TFLOP/s count the
                  pairs the heads attend;
  minference-vs-same  MInference's vertical-slash attention (index conversion and Triton kernel)
                  on Millipede's benchmark index: the columns and diagonal offsets per KV head
                  that `millipede-bench-sparse-attention --pattern-out DIR` wrote for the length
                  (--patterns DIR), each KV head's for its query heads, so that both kernels run
                  at equal density (the density columns of both rows show it).
MInference works on K/V repeated to 32 heads, as its forward does (repeat_kv_ms, not part of ms);
FlashInfer gets the same repeated K/V. Per case: ms (the layer, median of --iters, CUDA events),
kernel_ms (attention kernels alone), index_ms (vertical-slash: scoring, top-k and conversion;
block-sparse: the pooled builder; FlashInfer: that builder plus BSR conversion and plan()),
other_ms (the rest of the peer's path: its pads, sorts and output copies), index_share,
density (visible (query, key) pairs over causal pairs), executed_density and tflops_executed
(the 64x64 tiles the index names, which these kernels compute whole), tflops_useful.

The peers' code is not in this repository: cluster/peer-bundle.sh puts it in .gpu/peers (read
from --peers). Nothing is installed: FlashInfer's archive is unpacked under --work, where its JIT
modules and MInference's extension are also built on first use (nvcc needed; ninja comes with the
bundle). A peer that is missing or fails to load is reported as skipped, with the reason.
--check only loads the peers and needs no GPU.
"""
import argparse
import ast
import builtins
import contextlib
import importlib
import json
import math
import os
import shutil
import statistics
import sys
import tarfile
import time
import types
from pathlib import Path

try:
    import torch
except ImportError:  # main() says so; --help works without it
    torch = None

REPO = Path(__file__).resolve().parents[2]
Q_HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 128, 64
CASES = ("dense", "vs", "bs", "flashinfer", "vs-same", "a-shape")
GIB = 1 << 30
# What the peers' files must define; the function names are MInference's (commit fb56c91).
MI_FILES = ("minference/ops/pit_sparse_flash_attention_v2.py",
            "minference/ops/block_sparse_flash_attention.py",
            "minference/modules/minference_forward.py", "csrc/kernels.cpp",
            "csrc/vertical_slash_index.cu")
MI_FORWARD_NAMES = ("last_q", "arange", "LAST_Q_MASK", "sum_all_diagonal_matrix",
                    "minference_prefill_kernel", "minference_prefill_forward")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seq", default="131072,524288,1048576", help="comma-separated lengths")
    ap.add_argument("--cases", default=",".join(CASES), help="subset of " + ",".join(CASES))
    ap.add_argument("--vs", default="1000:6096,512:2048", help="vertical:slash settings")
    ap.add_argument("--warmup", type=int, default=1, help="untimed runs after the first")
    ap.add_argument("--iters", type=int, default=3, help="timed sparse runs (median)")
    ap.add_argument("--dense-iters", type=int, default=1, help="timed dense runs (median)")
    ap.add_argument("--peers", type=Path, default=REPO / ".gpu" / "peers")
    ap.add_argument("--work", type=Path, default=REPO / ".gpu" / "peers-work",
                    help="where FlashInfer is unpacked and extensions are built")
    ap.add_argument("--max-gib", type=float, default=70.0, help="skip cases estimated above this")
    ap.add_argument("--flashinfer-backend", default="auto", choices=("auto", "fa2", "fa3"))
    ap.add_argument("--json", type=Path, help="also write all results as one JSON document")
    ap.add_argument("--a-shape", default="128:4096", help="a-shape case: sinks:window")
    ap.add_argument("--patterns", type=Path,
                    help="vs-same: the folder of millipede-bench-sparse-attention --pattern-out")
    ap.add_argument("--check", action="store_true", help="only load the peers (no GPU needed)")
    args = ap.parse_args(argv)
    try:
        args.seq = [int(s) for s in args.seq.split(",") if s]
        args.vs = [tuple(int(x) for x in p.split(":")) for p in args.vs.split(",") if p]
        args.a_shape = tuple(int(x) for x in args.a_shape.split(":"))
    except ValueError:
        ap.error("--seq takes integers and --vs vertical:slash pairs of integers")
    args.cases = [c for c in args.cases.split(",") if c]
    for c in args.cases:
        if c not in CASES:
            ap.error(f"unknown case {c!r} (cases: {', '.join(CASES)})")
    for s in args.seq:
        if s <= 0 or s % BLOCK:
            ap.error(f"--seq {s}: lengths must be positive multiples of {BLOCK}")
    if any(len(p) != 2 or min(p) <= 0 for p in args.vs):
        ap.error("--vs takes positive vertical:slash pairs")
    if len(args.a_shape) != 2 or min(args.a_shape) <= 0:
        ap.error("--a-shape takes positive sinks:window")
    if args.iters < 1 or args.dense_iters < 1 or args.warmup < 0:
        ap.error("--iters and --dense-iters must be at least 1, --warmup at least 0")
    return args


class PeerUnavailable(Exception):
    """A peer that cannot run here; the message says why."""


def log(*parts):
    print("sparse_peers:", *parts, file=sys.stderr, flush=True)


def add_site(site):
    """Puts an unpacked site folder after the machine's own packages, for child processes too."""
    sys.path.append(str(site))
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"),
                                                             str(site)]))
    if (site / "bin").is_dir():
        os.environ["PATH"] = os.environ.get("PATH", "") + os.pathsep + str(site / "bin")


# ---- MInference: its files, imported without its package's __init__ (transformers & co) ----

class Spans:
    """CUDA-event spans around named calls, summed per name; inactive calls pass through."""

    def __init__(self):
        self.active, self.capture, self.events = False, None, {}

    def wrap(self, name, fn):
        def wrapped(*a, **kw):
            if not self.active:
                out = fn(*a, **kw)
                if self.capture:
                    self.capture(name, out)
                return out
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn(*a, **kw)
            stop.record()
            self.events.setdefault(name, []).append((start, stop))
            return out
        return wrapped

    def totals(self):
        return {n: sum(s.elapsed_time(e) for s, e in ev) for n, ev in self.events.items()}


class MInference:
    def __init__(self, root, work):
        from torch.utils import cpp_extension
        missing = [f for f in MI_FILES if not (root / f).is_file()]
        if missing:
            raise PeerUnavailable(f"{root} lacks {', '.join(missing)} (run cluster/peer-bundle.sh)")
        source = root / "SOURCE"  # "MInference COMMIT from PATH", written by the bundle script
        self.commit = source.read_text().split()[1] if source.is_file() else "unknown"
        if not torch.cuda.is_available() and "TORCH_CUDA_ARCH_LIST" not in os.environ:
            os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"  # building without a GPU (--check)
        build = work / "minference-ext"
        build.mkdir(parents=True, exist_ok=True)
        try:
            with contextlib.redirect_stdout(sys.stderr):
                ext = cpp_extension.load(
                    name="minference_vertical_slash_index", build_directory=str(build),
                    sources=[str(root / f) for f in MI_FILES[3:5]],
                    extra_cflags=["-O3"], extra_cuda_cflags=["-O3"])
        except (RuntimeError, OSError, ImportError) as e:
            raise PeerUnavailable(f"building csrc/vertical_slash_index.cu failed: {e}") from e
        for name, sub in (("minference", ""), ("minference.ops", "ops"),
                          ("minference.modules", "modules")):
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root / "minference" / sub)]
            sys.modules[name] = pkg
        sys.modules["minference.cuda"] = ext
        # Their module prints a recommendation on import; keep stdout for results.
        try:
            with contextlib.redirect_stdout(sys.stderr):
                self.pit = importlib.import_module("minference.ops.pit_sparse_flash_attention_v2")
                self.bsa = importlib.import_module("minference.ops.block_sparse_flash_attention")
        except ImportError as e:
            raise PeerUnavailable(f"importing MInference's Triton kernels failed: {e}") from e
        # SGLang's or vLLM's kernels replace the Triton ones where installed; time the Triton path.
        self.replaced = [n for n in ("sparse_attn_func", "convert_vertical_slash_indexes_opt")
                         if getattr(self.pit, n, None) is not None]
        self.pit.sparse_attn_func = self.pit.convert_vertical_slash_indexes_opt = None
        self.forward_code = self._forward_code(root / MI_FILES[2])
        self.spans = Spans()
        self.forward_ns = None

    @staticmethod
    def _forward_code(path):
        """Their module-level prefill entry points, without the module's imports."""
        tree = ast.parse(path.read_text(), str(path))
        keep, found = [], set()
        for node in tree.body:
            names = ([node.name] if isinstance(node, ast.FunctionDef) else
                     [t.id for t in node.targets if isinstance(t, ast.Name)]
                     if isinstance(node, ast.Assign) else [])
            if any(n in MI_FORWARD_NAMES for n in names):
                keep.append(node)
                found.update(names)
        lacking = [n for n in MI_FORWARD_NAMES if n not in found]
        if lacking:
            raise PeerUnavailable(f"{path} defines no {', '.join(lacking)} (written for fb56c91)")
        return compile(ast.Module(body=keep, type_ignores=[]), str(path), "exec")

    def prepare(self):
        """Runs their definitions (LAST_Q_MASK is made on the GPU) with timed call sites."""

        def absent(*_a, **_k):
            raise RuntimeError("not part of this benchmark")
        sp, pit, bsa = self.spans, self.pit, self.bsa
        pit.convert_vertical_slash_indexes = sp.wrap("convert", pit.convert_vertical_slash_indexes)
        pit._triton_mixed_sparse_attention = sp.wrap("kernel", pit._triton_mixed_sparse_attention)
        bsa._build_block_index = sp.wrap("bs_index", bsa._build_block_index)
        bsa._triton_block_sparse_attention = sp.wrap("kernel", bsa._triton_block_sparse_attention)
        ns = {"__builtins__": builtins, "__name__": "minference_forward", "torch": torch,
              "math": math, "os": os, "json": json, "streaming_forward": absent,
              "flash_attn_func": absent, "search_pattern": absent,
              "vertical_slash_sparse_attention": sp.wrap("vs_call",
                                                         pit.vertical_slash_sparse_attention),
              "block_sparse_attention": bsa.block_sparse_attention}
        exec(self.forward_code, ns)
        ns["minference_prefill_kernel"] = sp.wrap("head", ns["minference_prefill_kernel"])
        self.forward_ns = ns

    def forward(self, q, k, v, pattern):
        """One layer as their forward runs it: per head, pattern = (kind, vertical, slash)."""
        heads = {str(h): [pattern[0], pattern[1], pattern[2], 1] for h in range(q.shape[1])}
        kwargs = {"attn_forward_config": {"best_pattern": [heads]}, "layer_idx": 0,
                  "num_hidden_layers": 1}
        return self.forward_ns["minference_prefill_forward"](q, k, v, kwargs)


# ---- FlashInfer: an unpacked archive, imported from there ----

def load_flashinfer(archive, work):
    if not archive.is_file():
        raise PeerUnavailable(f"no {archive} (cluster/peer-bundle.sh without --no-flashinfer)")
    site = work / "flashinfer-site"
    stamp = f"{archive.stat().st_size} {archive.stat().st_mtime_ns}"
    marker = site / ".unpacked-from"
    if not (marker.is_file() and marker.read_text() == stamp):
        log(f"unpacking {archive} into {site}")
        tmp = work / "flashinfer-site.tmp"
        for d in (tmp, site):
            if d.exists():
                shutil.rmtree(d)
        with tarfile.open(archive, "r:xz") as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(site)
        marker.write_text(stamp)
    # Its JIT cache goes under --work too (it reads this when imported).
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(work))
    add_site(site)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            import flashinfer
            import flashinfer.sparse  # noqa: F401
    except ImportError as e:
        raise PeerUnavailable(f"import flashinfer failed: {e}") from e
    return flashinfer


def load_peers(args):
    """{name: (object or None, status)} for the peers the chosen cases need."""
    peers = {}
    site = args.peers / "site"
    if site.is_dir():
        add_site(site)
    if {"vs", "bs", "flashinfer", "vs-same", "a-shape"} & set(args.cases):
        try:
            peers["minference"] = (MInference(args.peers / "minference", args.work), "ok")
        except PeerUnavailable as e:
            peers["minference"] = (None, str(e))
    if "flashinfer" in args.cases:
        try:
            peers["flashinfer"] = (load_flashinfer(args.peers / "flashinfer.tar.xz", args.work),
                                   "ok")
        except PeerUnavailable as e:
            peers["flashinfer"] = (None, str(e))
    for name, (_, status) in peers.items():
        if status != "ok":
            log(f"{name} skipped: {status}")
    return peers


# ---- measurements ----

def median_ms(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times), times


def causal_pairs(seq, heads):
    return heads * seq * (seq + 1) / 2.0


def rates(row, tiles, visible, seq, heads):
    """Density and TFLOP/s fields from executed 64x64 tiles and visible pairs (all heads)."""
    flop_per_pair = 4.0 * HEAD_DIM
    row.update(executed_tiles=tiles, density=visible / causal_pairs(seq, heads),
               executed_density=tiles * BLOCK * BLOCK / causal_pairs(seq, heads),
               tflops_executed=tiles * BLOCK * BLOCK * flop_per_pair / (row["kernel_ms"] * 1e9),
               tflops_useful=visible * flop_per_pair / (row["kernel_ms"] * 1e9))
    if row.get("ms"):
        row["index_share"] = row["index_ms"] / row["ms"]
    return row


def pair_table(device):
    """table[d + 64]: visible pairs of a 64x64 tile whose first row is d past its first key."""
    d = torch.arange(-BLOCK, BLOCK + 1, device=device)[:, None]
    return (d + torch.arange(BLOCK, device=device)[None, :] + 1).clamp(0, BLOCK).sum(1)


class IndexStats:
    """Counts tiles and visible pairs of the indices MInference builds (untimed first run)."""

    def __init__(self, seq):
        self.seq, self.rows = seq, seq // BLOCK
        self.tiles = self.visible = 0
        self.table = None
        self.block_index = []

    def __call__(self, name, out):
        if name == "convert":  # block_count, block_offset, column_count, column_index
            counts, offsets, cols = out[0].view(-1).long(), out[1], out[2].view(-1).long()
            rows = counts.numel()
            offsets = offsets.view(rows, -1)
            self.table = self.table if self.table is not None else pair_table(counts.device)
            self.tiles += int(counts.sum()) + int(((cols + BLOCK - 1) // BLOCK).sum())
            self.visible += BLOCK * int(cols.sum())  # columns all lie left of their row block
            for r0 in range(0, rows, 1024):
                c = counts[r0:r0 + 1024]
                width = int(c.max())
                if width == 0:
                    continue
                starts = torch.arange(r0, r0 + c.numel(), device=c.device)[:, None] * BLOCK
                delta = (starts - offsets[r0:r0 + c.numel(), :width]).clamp(-BLOCK, BLOCK)
                used = torch.arange(width, device=c.device)[None, :] < c[:, None]
                self.visible += int((self.table[delta + BLOCK] * used).sum())
        elif name == "bs_index":  # [1, 1, rows (+1 padding row), top_k], sorted per row
            idx = out.view(-1, out.shape[-1])[:self.rows].long()
            m = torch.arange(self.rows, device=idx.device)
            used = torch.arange(idx.shape[1], device=idx.device)[None, :] <= m[:, None]
            self.tiles += int(used.sum())
            diag = int(((idx == m[:, None]) & used).sum())
            full = int(used.sum()) - diag  # a diagonal tile sees its lower triangle only
            self.visible += full * BLOCK * BLOCK + diag * BLOCK * (BLOCK + 1) // 2
            self.block_index.append(out.view(-1, out.shape[-1])[:self.rows].clone())


def run_minference(mi, q, k, v, pattern, args, stats):
    """Their layer: an untimed run that records the index, warm-ups, then timed runs."""
    return timed_spans(mi.spans, lambda: mi.forward(q, k, v, pattern), args, stats)


def timed_spans(sp, call, args, stats):
    """An untimed call whose index `stats` records, warm-ups, then timed calls: the median of
    the whole call ("ms", every run in "ms_all") and of each named span inside it."""
    sp.capture = stats
    call()
    sp.capture = None
    for _ in range(args.warmup):
        call()
    samples = []
    for _ in range(args.iters):
        sp.events, sp.active = {}, True
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = call()
        stop.record()
        torch.cuda.synchronize()
        sp.active = False
        del out
        samples.append(dict(sp.totals(), ms=start.elapsed_time(stop)))
    med = {n: statistics.median(s.get(n, 0.0) for s in samples) for n in samples[0]}
    med["ms_all"] = [s["ms"] for s in samples]
    return med


def case_vs(mi, q, k, v, vertical, slash, args):
    stats = IndexStats(q.shape[2])
    t = run_minference(mi, q, k, v, ("vertical_and_slash", vertical, slash), args, stats)
    index_ms = t["head"] - t["vs_call"] + t["convert"]
    row = {"impl": "minference-vs", "vertical": vertical, "slash": slash, "last_q": 64,
           "ms": t["ms"], "ms_all": t["ms_all"], "kernel_ms": t["kernel"], "index_ms": index_ms,
           "score_topk_ms": t["head"] - t["vs_call"], "convert_ms": t["convert"],
           "other_ms": t["ms"] - t["kernel"] - index_ms}
    return rates(row, stats.tiles, stats.visible, q.shape[2], q.shape[1])


def case_vs_same(mi, q, k, v, args):
    """MInference's conversion and kernel on the pattern Millipede's benchmark wrote."""
    seq = q.shape[2]
    if args.patterns is None:
        raise PeerUnavailable("vs-same needs --patterns DIR")
    path = args.patterns / f"vertical-slash-{seq}.json"
    pattern = json.loads(path.read_text())
    group = Q_HEADS // pattern["kv_heads"]

    def per_query_head(lists, pad):
        # One row per query head; rows padded to equal length with `pad` (a repeated diagonal
        # offset changes nothing; columns come out equal-sized from the benchmark).
        width = max(len(x) for x in lists)
        rows = [x + [pad] * (width - len(x)) for x in lists for _ in range(group)]
        return torch.tensor(rows, dtype=torch.int32, device=q.device)[None]
    if len({len(c) for c in pattern["columns"]}) != 1:
        raise ValueError(f"{path}: heads with different column counts")
    v_idx = per_query_head(pattern["columns"], None)
    s_idx = per_query_head(pattern["diagonals"], 0)
    stats = IndexStats(seq)
    sp = mi.spans

    def call():
        # One head per call, as their forward loops: with every head at once at 1M their index
        # conversion's and kernel's 32-bit offsets overflow.
        for h in range(q.shape[1]):
            out = mi.pit.vertical_slash_sparse_attention(
                q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1], v_idx[:, h:h + 1], s_idx[:, h:h + 1])
        return out
    med = timed_spans(sp, call, args, stats)
    row = {"impl": "minference-vs-same", "vertical": pattern["vertical"],
           "slash": pattern["slash"], "pattern": str(path.name), "ms": med["ms"],
           "ms_all": med["ms_all"], "kernel_ms": med["kernel"],
           "index_ms": med["convert"], "convert_ms": med["convert"],
           "other_ms": med["ms"] - med["kernel"] - med["convert"]}
    return rates(row, stats.tiles, stats.visible, seq, q.shape[1])


def a_shape_pairs(seq, sinks, window):
    """Pairs one A-shape head attends over seq tokens: the last `window` keys and the first
    `sinks` before them."""
    pairs = 0
    for p in range(seq):
        visible = p + 1
        pairs += visible if visible <= window else window + min(sinks, visible - window)
    return pairs


def case_a_shape(mi, q, k, v, args):
    """MInference's streaming (A-shape) kernel, one head a call, timed whole."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            streaming = importlib.import_module("minference.ops.streaming_kernel")
    except ImportError as e:
        raise PeerUnavailable(f"minference/ops/streaming_kernel.py: {e} (re-run "
                              "cluster/peer-bundle.sh)") from e
    sinks, window = args.a_shape
    heads, seq = q.shape[1], q.shape[2]

    def call():
        for h in range(heads):
            out = streaming.streaming_forward(q[:, h:h + 1], k[:, h:h + 1], v[:, h:h + 1],
                                              sinks, window)
        return out
    call()
    ms, all_ms = median_ms(call, args.warmup, args.iters)
    pairs = heads * a_shape_pairs(seq, sinks, window)
    return {"impl": "minference-a-shape", "sinks": sinks, "window": window, "ms": ms,
            "ms_all": all_ms, "kernel_ms": ms, "index_ms": 0.0,
            "density": pairs / causal_pairs(seq, heads),
            "tflops_useful": pairs * 4.0 * HEAD_DIM / (ms * 1e9)}


def case_bs(mi, q, k, v, args, stats):
    t = run_minference(mi, q, k, v, ("block_sparse", 0, 0), args, stats)
    row = {"impl": "minference-bs", "top_blocks": 100, "ms": t["ms"], "ms_all": t["ms_all"],
           "kernel_ms": t["kernel"], "index_ms": t["bs_index"],
           "other_ms": t["ms"] - t["kernel"] - t["bs_index"]}
    return rates(row, stats.tiles, stats.visible, q.shape[2], q.shape[1])


def case_flashinfer(fi, q, k, v, bs_row, stats, args):
    """MInference's top-100 blocks per (head, query block) as one BSR over head-major rows."""
    heads, seq, rows = q.shape[1], q.shape[2], q.shape[2] // BLOCK
    idx = torch.stack(stats.block_index)  # [heads, rows, top_k]
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    used = torch.arange(idx.shape[2], device=q.device)[None, :] <= \
        torch.arange(rows, device=q.device)[:, None]  # MInference runs min(m + 1, top_k) blocks
    counts = used.sum(1, dtype=torch.int32).repeat(heads)
    indptr = torch.zeros(heads * rows + 1, dtype=torch.int32, device=q.device)
    indptr[1:] = counts.cumsum(0)
    head_base = (torch.arange(heads, device=q.device, dtype=torch.int32) * rows)[:, None, None]
    indices = (idx + head_base).masked_select(used[None]).to(torch.int32)
    stop.record()
    torch.cuda.synchronize()
    bsr_ms = start.elapsed_time(stop)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=q.device)
    wrapper = fi.BlockSparseAttentionWrapper(ws, backend=args.flashinfer_backend)
    # The default 8 MiB plan buffer is too small for heads x query blocks rows.
    wrapper.reset_workspace_buffer(ws, torch.empty(256 << 20, dtype=torch.uint8, device=q.device))
    n = heads * seq
    t0 = time.perf_counter()
    wrapper.plan(indptr, indices, n, n, BLOCK, BLOCK, 1, 1, HEAD_DIM, causal=True,
                 q_data_type=torch.bfloat16, o_data_type=torch.bfloat16)
    torch.cuda.synchronize()
    plan_ms = (time.perf_counter() - t0) * 1e3
    qf, kf, vf = (x.view(n, 1, HEAD_DIM) for x in (q, k, v))
    out = torch.empty_like(qf)
    ms, all_ms = median_ms(lambda: wrapper.run(qf, kf, vf, out=out), args.warmup + 1, args.iters)
    index_ms = bs_row["index_ms"] + bsr_ms + plan_ms
    row = {"impl": "flashinfer-bs", "backend": wrapper._backend, "top_blocks": 100,
           "ms": ms + index_ms, "kernel_ms": ms, "kernel_ms_all": all_ms, "index_ms": index_ms,
           "builder_ms": bs_row["index_ms"], "bsr_ms": bsr_ms, "plan_ms": plan_ms}
    return rates(row, stats.tiles, stats.visible, seq, heads)


def flashinfer_jit(fi, backend):
    """Builds (first use) and loads FlashInfer's module on a tiny problem; returns seconds."""
    t0 = time.perf_counter()
    ws = torch.empty(16 << 20, dtype=torch.uint8, device="cuda")
    w = fi.BlockSparseAttentionWrapper(ws, backend=backend)
    w.plan(torch.tensor([0, 1, 3], dtype=torch.int32, device="cuda"),
           torch.tensor([0, 0, 1], dtype=torch.int32, device="cuda"), 128, 128, BLOCK, BLOCK, 1, 1,
           HEAD_DIM, causal=True, q_data_type=torch.bfloat16, o_data_type=torch.bfloat16)
    x = torch.randn(128, 1, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    w.run(x, x, x)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def prebuild_flashinfer(fi, args):
    """--check: builds FlashInfer's module now, so that timed runs find it built. Without a GPU
    this builds the Hopper (fa3) module, the one that auto picks on H100/H200."""
    try:
        t0 = time.perf_counter()
        if torch.cuda.is_available():
            flashinfer_jit(fi, args.flashinfer_backend)
        elif args.flashinfer_backend == "fa2":
            return fi, "ok (fa2 is built on first use with a GPU)"
        else:
            from flashinfer.jit.attention.modules import gen_batch_prefill_module
            os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "9.0a")
            bf16 = torch.bfloat16
            gen_batch_prefill_module("fa3", bf16, bf16, bf16, torch.int32, HEAD_DIM, HEAD_DIM, 0,
                                     False, False, False).build()
        log(f"flashinfer module ready in {time.perf_counter() - t0:.0f} s")
        return fi, "ok"
    except Exception as e:  # reported, as a run would report it
        return None, f"building FlashInfer's module failed: {type(e).__name__}: {str(e)[:300]}"


def case_dense(q, k, v, args):
    """SDPA's flash backend with native GQA where it takes it, else K/V expanded to 32 heads."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def sdpa(q, k, v, gqa):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    small = [x[:, :, :4096] for x in (q, k, v)]
    try:
        sdpa(*small, True)
        gqa = True
    except RuntimeError:
        gqa = False
        k, v = (x.repeat_interleave(Q_HEADS // KV_HEADS, dim=1) for x in (k, v))
        sdpa(small[0], k[:, :, :4096], v[:, :, :4096], False)
    # A full-size warm-up only where it is cheap (the short call above loaded the kernels).
    warmup = 1 if q.shape[2] <= 131072 else 0
    ms, all_ms = median_ms(lambda: sdpa(q, k, v, gqa), warmup, args.dense_iters)
    return {"impl": "sdpa-flash", "gqa": "native" if gqa else "expanded kv", "ms": ms,
            "ms_all": all_ms, "kernel_ms": ms, "index_ms": 0.0, "density": 1.0,
            "tflops": 4.0 * causal_pairs(q.shape[2], Q_HEADS) * HEAD_DIM / (ms * 1e9)}


def estimate_gib(case, seq):
    """Peak estimate: resident Q/K/V, repeated K/V where used, the output and the largest
    per-head temporaries of the case's path."""
    q_gib = Q_HEADS * seq * HEAD_DIM * 2 / GIB
    head, rows = q_gib / Q_HEADS, seq // BLOCK + 1
    extra = {"dense": q_gib * 2.1,  # output, lse, K/V expanded if GQA is not native
             "vs": 3 * q_gib + 12 * head,  # repeated K/V, output; pads, scores, index per head
             "bs": 3 * q_gib + 4 * head + 2.5 * rows * rows * 4 / GIB,  # pooled score matrix
             "flashinfer": 3 * q_gib + 1.0,
             "vs-same": 3 * q_gib + 2 * head,
             "a-shape": 3 * q_gib + 4 * head}[case]
    return q_gib * (1 + 2 * KV_HEADS / Q_HEADS) + extra


class SeqRun:
    """One length's tensors and the results that later cases reuse."""

    def __init__(self, args, peers, seq):
        self.args, self.seq = args, seq
        self.mi = peers.get("minference", (None, ""))[0]
        self.fi = peers.get("flashinfer", (None, ""))[0]
        self.q, self.k, self.v = (
            torch.randn(1, h, seq, HEAD_DIM, device="cuda", dtype=torch.bfloat16)
            for h in (Q_HEADS, KV_HEADS, KV_HEADS))
        self.kr = self.vr = self.repeat_ms = self.bs = None

    def repeated(self):
        """K/V repeated to the query heads, as MInference's forward does first (timed)."""
        if self.kr is None:
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.kr, self.vr = (
                x[:, :, None].expand(1, KV_HEADS, Q_HEADS // KV_HEADS, self.seq, HEAD_DIM)
                .reshape(1, Q_HEADS, self.seq, HEAD_DIM) for x in (self.k, self.v))
            stop.record()
            torch.cuda.synchronize()
            self.repeat_ms = start.elapsed_time(stop)
        return self.q, self.kr, self.vr

    def block_sparse(self):
        """MInference's block-sparse row and index (once per length; FlashInfer reuses them)."""
        if self.bs is None:
            stats = IndexStats(self.seq)
            self.bs = (case_bs(self.mi, *self.repeated(), self.args, stats), stats)
        return self.bs

    def case(self, case, setting):
        if case == "dense":
            return case_dense(self.q, self.k, self.v, self.args)
        if case == "vs":
            row = case_vs(self.mi, *self.repeated(), *setting, self.args)
        elif case == "vs-same":
            row = case_vs_same(self.mi, *self.repeated(), self.args)
        elif case == "a-shape":
            row = case_a_shape(self.mi, *self.repeated(), self.args)
        elif case == "bs":
            row = dict(self.block_sparse()[0])
        else:
            bs_row, stats = self.block_sparse()
            row = case_flashinfer(self.fi, *self.repeated(), bs_row, stats, self.args)
        row["repeat_kv_ms"] = self.repeat_ms
        return row


def run(args, peers):
    rows, jit_s = [], None
    mi, fi = (peers.get(n, (None, ""))[0] for n in ("minference", "flashinfer"))
    if mi is not None:
        mi.prepare()
    needs = {"vs": ["minference"], "bs": ["minference"], "vs-same": ["minference"],
             "a-shape": ["minference"],
             "flashinfer": ["minference", "flashinfer"]}
    for seq in args.seq:
        sr = SeqRun(args, peers, seq)
        for case in args.cases:
            for setting in (args.vs if case == "vs" else [None]):
                row = {"bench": "sparse-peers", "seq": seq, "case": case}
                if setting:
                    row.update(vertical=setting[0], slash=setting[1])
                if case == "flashinfer" and fi is not None and jit_s is None:
                    try:
                        jit_s = flashinfer_jit(fi, args.flashinfer_backend)
                    except Exception as e:  # every FlashInfer row then says why
                        fi, peers["flashinfer"] = None, (None, f"JIT build or load failed: "
                                                         f"{type(e).__name__}: {str(e)[:300]}")
                missing = [f"{p}: {peers[p][1]}" for p in needs.get(case, [])
                           if peers[p][0] is None]
                est = estimate_gib(case, seq)
                if missing:
                    row["skipped"] = "; ".join(missing)
                elif est > args.max_gib:
                    row["skipped"] = f"needs ~{est:.0f} GiB, over --max-gib {args.max_gib:.0f}"
                else:
                    try:
                        row.update(sr.case(case, setting))
                        if case == "flashinfer":
                            row["jit_s"] = jit_s
                    except torch.cuda.OutOfMemoryError as e:
                        row["skipped"] = f"out of GPU memory: {str(e)[:200]}"
                    except Exception as e:  # a peer's failure is its row's result, not the run's
                        row["skipped"] = f"failed: {type(e).__name__}: {str(e)[:300]}"
                    finally:
                        if mi is not None:
                            mi.spans.active, mi.spans.capture = False, None
                        torch.cuda.synchronize()
                        torch.cuda.empty_cache()
                print(json.dumps(row), flush=True)
                rows.append(row)
        del sr
        torch.cuda.empty_cache()
    report(args, peers, rows)
    return 0


def report(args, peers, rows):
    import triton
    dev = torch.cuda.get_device_name()
    doc = {"bench": "sparse-peers", "device": dev, "torch": torch.__version__,
           "cuda": torch.version.cuda, "triton": triton.__version__,
           "shape": {"q_heads": Q_HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                     "dtype": "bf16", "causal": True},
           "peers": {n: s for n, (_, s) in peers.items()}, "rows": rows}
    mi = peers.get("minference", (None, ""))[0]
    if mi is not None:
        doc["minference"] = {"commit": mi.commit, "faster_kernels_present_but_unused": mi.replaced}
    fi = peers.get("flashinfer", (None, ""))[0]
    if fi is not None:
        doc["flashinfer"] = fi.__version__
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"\n{dev}, torch {torch.__version__}\n")
    print("| seq | impl | setting | ms | kernel ms | index ms | index share | density | "
          "TFLOP/s executed |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        impl = r.get("impl", r["case"])
        if "skipped" in r:
            print(f"| {r['seq']} | {impl} | skipped: {r['skipped'][:70]} | | | | | | |")
            continue
        setting = (f"{r['vertical']}/{r['slash']}" if "vertical" in r else
                   f"top {r['top_blocks']}" if "top_blocks" in r else
                   f"{r['sinks']}+{r['window']}" if "sinks" in r else "dense")
        tflops = r.get("tflops_executed", r.get("tflops", r.get("tflops_useful", 0.0)))
        print(f"| {r['seq']} | {impl} | {setting} | {r['ms']:.2f} | {r['kernel_ms']:.2f} | "
              f"{(r['index_ms'] or 0):.2f} | {r.get('index_share', 0):.3f} | "
              f"{r['density']:.4f} | {tflops:.0f} |")


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        print("sparse_peers.py: PyTorch is needed (import torch failed)", file=sys.stderr)
        return 2
    if not args.check and not torch.cuda.is_available():
        print("sparse_peers.py: no CUDA GPU is visible (torch.cuda.is_available() is False); this "
              "benchmark needs one (--check only loads the peers)", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    peers = load_peers(args)
    if args.check:
        if peers.get("flashinfer", (None,))[0] is not None:
            peers["flashinfer"] = prebuild_flashinfer(peers["flashinfer"][0], args)
        print(json.dumps({n: s for n, (_, s) in peers.items()}, indent=1))
        return 0 if all(s == "ok" for _, s in peers.values()) else 1
    return run(args, peers)


if __name__ == "__main__":
    sys.exit(main())
