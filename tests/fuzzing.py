"""Generators of hostile inputs and the oracle that judges one run (shared by the fuzz tests
and ``scripts/fuzz.py``).

Every generator takes a :class:`random.Random` and returns the bytes of one file: a session,
an authors'-format config, a profile store or a measurement CSV, valid or mutated by a few
hostile changes (wrong types, out-of-bound and non-finite numbers, missing and unknown
fields, deep nesting, markup and control characters in names, corrupted bytes, HDF5 links
and external storage, unknown filters, wrong dtypes, absurd sizes).

:func:`run_cli` runs one ``vtrain`` command in this process and classifies the outcome:

``ok``           exit 0 and, with ``--json``, strict JSON whose numbers are all finite
``clean_error``  exit 2 and exactly one line ``vtrain: error: ...`` on stderr
``non_finite``   exit 0 with Infinity or NaN in the result
``crash``        anything else: another exit status, a traceback, several lines
(``hang`` is decided by the caller's clock: :class:`CaseTimeout`, which no handler of the
program catches.) Kinds with an oracle of their own (:data:`CHECKS`) add two outcomes:

``silent_model``  a session less one field ran (exit 0) as another model or plan than the
                  complete session's
``unescaped``     an exported launch script that ``bash -n`` refuses, that runs anything
                  but one ``torchrun``, or raw control characters printed to the terminal
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
from pathlib import Path
from typing import Any, Callable

import h5py
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
BASE_STORE = ROOT / "profiles" / "A100-SXM4-80GB.h5"
OUTCOMES = ("ok", "clean_error", "crash", "hang", "non_finite", "silent_model", "unescaped")


class CaseTimeout(BaseException):
    """Raised by a caller's alarm when a case runs too long (not an ``Exception``, so the
    program under test cannot swallow it)."""

NASTY: list[Any] = [
    None, True, False, "false", "true", "8", "", "x" * 5000, "[/x]", "\x1b[2J\x07", -1, 0, 1, 3,
    7, 1.5, -0.0, 2**31 - 1, 2**31, 2**53 + 1, 2**63, 2**64 + 1, 10**40, 1e308, 5e-324, 1e-300,
    float("inf"), float("-inf"), float("nan"), [], [1], {}, {"a": 1}, 10_000, 10_001, 1_000_000,
    2**24, 2**20, 0.1, 0.09, 1e16, 1.0000001e16,
    # integers beyond a float's range (no conversion may overflow): 10**309 and a 401-digit one
    10**309, -(10**309), 10**400, 2**1100,
]

#: profile_path strings that name no file a user could mean (an unknown ~user, a NUL byte, a
#: lone surrogate, a folder's name cut by NUL, very long components, control characters).
HOSTILE_PATHS = ["~nosuchuser_xyz/a.h5", "~nosuchuser_xyz", "a\x00b.h5", "\ud800.h5",
                 "/proc/self/environ", "/proc/self/cwd/x.h5", "x/" * 3000 + "a.h5",
                 "b" * 300 + ".h5", "\n.h5", "~" * 50, "\x1b[2J.h5", "file:///etc/passwd"]

BASE_SESSION: dict[str, Any] = {
    "format": "vtrain-session", "version": 1,
    "model": {"name": "GPT-3 1.3B", "num_layers": 24, "hidden_size": 2048, "num_attention_heads": 16,
              "ffn_hidden_size": None, "seq_length": 2048, "vocab_size": 50257},
    "plan": {"tensor_parallel": 2, "pipeline_parallel": 2, "data_parallel": 2, "micro_batch_size": 4,
             "global_batch_size": 256, "schedule": "1f1b", "recompute": "none", "precision": "bf16"},
    "cluster": {"gpu": "A100-SXM4-80GB", "gpus_per_node": 8, "intra_node_bandwidth_gbytes_per_s": None,
                "inter_node_bandwidth_gbits_per_s": 800.0, "profile_path": None},
    "cost": {"price_per_gpu_hour_usd": 2.0, "training_tokens": 26e9},
    "notes": "fuzz",
}

BASE_AUTHORS: dict[str, Any] = {
    "num_gpus": 8, "gpu_name": "A100", "tensor_parallel_size": 2, "data_parallel_size": 2,
    "pipeline_parallel_size": 2, "global_batch_size": 64, "micro_batch_size": 2, "num_layers": 24,
    "hidden_size": 2048, "num_attention_heads": 16, "max_length": 2048, "use_gradient_bucket": False,
    "use_checkpoint": True, "pipeline_scheduling": "1f1b", "inter_node_bandwidth": 800,
    "intra_node_bandwidth": 150, "node_size": 8, "trace_path": "trace",
}

CSV_HEADER = ("# GPUs,global batch,micro batch,hidden size,attention heads,# layers,sequence length,"
              "tensor parallelism,data parallelism,pipeline parallelism,iteration time (ms)")
CSV_ROWS = ["8,8,2,2048,16,20,1024,4,1,2,160.6027", "8,4,1,1024,16,16,1024,1,2,4,77.216619",
            "8,16,2,1024,16,8,512,2,2,2,40.5"]


# --------------------------------------------------------------------------- JSON configs

def _nasty(rng: random.Random) -> Any:
    if rng.random() < 0.3:  # a plausible number, often breaking a divisibility rule
        return rng.choice([rng.randint(1, 64), rng.randint(1, 20_000), rng.uniform(0, 2000)])
    return rng.choice(NASTY)


def _deep(rng: random.Random, depth: int) -> str:
    """A placeholder that :func:`dumps` replaces by JSON nested ``depth`` deep (built as
    text: ``json.dumps`` itself recurses)."""
    return f"__DEEP_{depth}_{rng.choice('[{')}__"


def dumps(doc: Any) -> bytes:
    """``json.dumps(doc)`` (Infinity and NaN as Python writes them), deep placeholders expanded."""
    import re

    def expand(m: re.Match) -> str:
        n, kind = int(m.group(1)), m.group(2)
        return ("[" * n + "1" + "]" * n) if kind == "[" else ('{"k":' * n + "1" + "}" * n)
    return re.sub(r'"__DEEP_(\d+)_([\[{])__"', expand, json.dumps(doc)).encode()


def mutate_doc(doc: dict, rng: random.Random, sections: bool = True) -> Any:
    """``doc`` (a copy) with 0 to 3 hostile changes."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
        kind = rng.random()
        holders = [doc] + ([v for v in doc.values() if isinstance(v, dict)] if sections else [])
        holder = rng.choice(holders)
        keys = list(holder)
        if kind < 0.55 and keys:
            holder[rng.choice(keys)] = _nasty(rng)
        elif kind < 0.7 and keys:
            del holder[rng.choice(keys)]
        elif kind < 0.75:
            holder[rng.choice(["colour", "num_layer", "sweep", "studies", "x" * 300])] = _nasty(rng)
        elif kind < 0.8 and keys:
            holder[rng.choice(keys)] = _deep(rng, rng.choice([5, 63, 64, 65, 200, 1000, 5000]))
        elif kind < 0.85:
            return rng.choice([[], "text", 3, None, [doc], _deep(rng, 1000)])
        elif kind < 0.9 and sections and "model" in doc and isinstance(doc["model"], dict):
            doc["model"]["name"] = rng.choice(["[/x]", "[bold]a[/bold]", "\x1b]0;t\x07", "\u202egpt",
                                               "a\nb\r\x00", "[" * 40, "x" * 5000])
        elif kind < 0.95 and sections and isinstance(doc.get("cluster"), dict):
            doc["cluster"]["profile_path"] = rng.choice(
                ["../x.h5", "/dev/zero", "/etc/passwd", "/", ".", "", "nope.h5", "../../profiles/A100-SXM4-80GB.h5",
                 str(BASE_STORE), "~/x.h5", "a" * 5000 + ".h5", 3, *HOSTILE_PATHS])
        else:  # extreme but in-bounds sizes that still pass the divisibility rules
            if isinstance(doc.get("model"), dict) and isinstance(doc.get("plan"), dict):
                m, p = doc["model"], doc["plan"]
                m["num_layers"] = rng.choice([1, 2, 4, 10_000, 9_984])
                m["hidden_size"] = rng.choice([16, 2048, 65_536, 999_936])
                m["num_attention_heads"] = 16
                m["seq_length"] = rng.choice([1, 2048, 2**20, 2**24])
                m["vocab_size"] = rng.choice([1, 50257, 2**31 - 1])
                p.update(tensor_parallel=1, pipeline_parallel=1, data_parallel=1,
                         micro_batch_size=rng.choice([1, 2**20]), global_batch_size=2**20)
    return doc


def session_bytes(rng: random.Random) -> bytes:
    """A session file, valid or mutated (see :func:`mutate_doc`)."""
    return dumps(mutate_doc(BASE_SESSION, rng))


def authors_bytes(rng: random.Random) -> bytes:
    """An authors'-format config, valid or mutated."""
    return dumps(mutate_doc(BASE_AUTHORS, rng, sections=False))


def corrupt_text(data: bytes, rng: random.Random) -> bytes:
    """``data`` with bytes flipped, inserted, deleted or cut off."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        op = rng.random()
        pos = rng.randrange(len(b) + 1) if b else 0
        if op < 0.35 and b:
            b[min(pos, len(b) - 1)] = rng.randrange(256)
        elif op < 0.6:
            b[pos:pos] = rng.choice([b"[", b"{", b"]", b"\"", b",", b"\x00", b"\xff", b"1e999",
                                     b"NaN", b"-", b"9" * 30, b"\n"])
        elif op < 0.8 and b:
            del b[pos:pos + rng.randint(1, 20)]
        else:
            del b[pos:]
    return bytes(b)


def corrupted_session_bytes(rng: random.Random) -> bytes:
    """A valid session file's text, corrupted byte-wise."""
    return corrupt_text(json.dumps(BASE_SESSION, indent=1).encode(), rng)


def csv_bytes(rng: random.Random) -> bytes:
    """A measurement CSV (the authors' layout), field-wise mutated or byte-wise corrupted."""
    rows = [r.split(",") for r in rng.sample(CSV_ROWS, rng.randint(1, len(CSV_ROWS)))]
    for _ in range(rng.randint(0, 3)):
        r = rng.choice(rows)
        r[rng.randrange(len(r))] = rng.choice(
            ["nan", "inf", "-inf", "1e999", "-1", "0", "", "x", "1.5", "99999999999", str(2**63),
             "\x00", "1" * 5000, "\"", "[/x]", "2147483648", "0.000001"])
    text = "\n".join([CSV_HEADER] + [",".join(r) for r in rows]) + "\n"
    data = text.encode()
    return corrupt_text(data, rng) if rng.random() < 0.3 else data


# --------------------------------------------------------------------------- profile stores

def _any_attr_holder(f: h5py.File, rng: random.Random) -> Any:
    return rng.choice([f, f["op_model"], f["peak_flops"], f["provenance"], f["ops"], f["collectives"]])


def _datasets(f: h5py.File) -> list:
    found = []
    f.visititems(lambda name, obj: found.append(obj) if isinstance(obj, h5py.Dataset) else None)
    return found


#: Filter ids for the filter-pipeline mutations: h5py's own (allowed) and ids no HDF5 build
#: registers (refused: reading a chunk would make HDF5 search its plugin folders).
FILTER_IDS = [1, 2, 3, 32000, 4, 5, 6, 307, 32001, 32004, 32008, 32026, 65535]
#: Parameters a filter needs to be written at all (szip without them divides by zero, SIGFPE).
_FILTER_PARAMS = {1: (4,), 4: (32, 8)}
#: Scalar values of the wrong type for a number attribute.
WRONG_TYPED = ["1.0", "0.5", "", "nan", True, False, np.bool_(True), b"1", np.float16(0.5)]
#: Efficiencies just outside and inside the bounds, and the tiny numbers that pass "above 0".
EFFICIENCIES = [5e-324, 1e-300, 1e-12, 1e-3, 0.0099, 0.01, 0.5, 1.0, 1.0000001, 2.0, 2.1]


def _rewrite(ds: Any, data: np.ndarray, dtype: Any = None) -> None:
    """Replace dataset ``ds`` by one holding ``data`` (as ``dtype``), same name."""
    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
    del parent[name]
    with np.errstate(over="ignore", invalid="ignore"):  # float16 of a size: inf, on purpose
        parent.create_dataset(name, data=np.asarray(data) if dtype is None
                              else np.asarray(data).astype(dtype))


def _filtered(ds: Any, filter_ids: list[int]) -> None:
    """Replace dataset ``ds`` (numbers) by a chunked copy whose filter pipeline holds
    ``filter_ids`` (optional filters: HDF5 writes the chunks unfiltered when it lacks one,
    and records the pipeline as given)."""
    data = np.asarray(ds[()], dtype=np.float64)
    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
    del parent[name]
    dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    dcpl.set_chunk((max(1, data.size),))
    for fid in filter_ids:
        dcpl.set_filter(fid, h5py.h5z.FLAG_OPTIONAL, _FILTER_PARAMS.get(fid, ()))
    space = h5py.h5s.create_simple((data.size,))
    dsid = h5py.h5d.create(parent.id, name.encode(), h5py.h5t.NATIVE_DOUBLE, space, dcpl=dcpl)
    dsid.write(h5py.h5s.ALL, h5py.h5s.ALL, np.ascontiguousarray(data))


def _typed_mutation(f: h5py.File, rng: random.Random) -> None:
    """One value of the wrong type: a number attribute as a string or boolean, times as
    float16, integer keys as floats, residual columns as byte strings, a flag as a string."""
    choice = rng.randrange(6)
    if choice == 0:
        holder = rng.choice([f, f["op_model"], f["peak_flops"]])
        keys = [k for k in holder.attrs if k not in ("encoding-type", "encoding-version", "device_name")]
        holder.attrs[rng.choice(keys) if keys else "extra"] = rng.choice(WRONG_TYPED)
    elif choice == 1:
        ds = rng.choice([d for d in _datasets(f) if d.name.endswith(("/time_s", "/bytes", "_s"))])
        _rewrite(ds, ds[()], rng.choice([np.float16, np.int64, np.bool_, "S20"]))
    elif choice == 2:
        keys = [d for d in _datasets(f) if d.name.startswith("/ops/") and d.dtype.kind in "iu"]
        ds = rng.choice(keys)
        _rewrite(ds, ds[()], rng.choice([np.float64, np.float16, np.bool_, "S8"]))
    elif choice == 3 and "residuals" in f:
        ds = rng.choice([d for d in _datasets(f) if d.name.startswith("/residuals/")])
        _rewrite(ds, ds.asstr()[()] if ds.dtype.kind == "O" else ds[()], "S20")
    elif choice == 4:
        f["provenance"].attrs["peak_fraction_fitted"] = rng.choice(["false", 0, 1, True, b"no"])
    else:
        f.attrs["encoding-version"] = rng.choice([True, "2", 2.0, np.float64(1.0)])


def _curve_mutation(f: h5py.File, rng: random.Random) -> None:
    """A collective curve whose time falls as the size grows (reversed, one point dropped
    below its neighbours, or a slow decline)."""
    curves = [d.parent for d in _datasets(f)
              if d.name.startswith("/collectives/") and d.name.endswith("/time_s")]
    if not curves:  # an earlier mutation took the curves away (a link, a deletion)
        return
    g = rng.choice(curves)
    t = g["time_s"][()]
    choice = rng.randrange(3)
    if choice == 0:
        t = t[::-1].copy()
    elif choice == 1:
        t[rng.randrange(1, len(t))] *= rng.choice([0.1, 0.5, 0.74, 0.76, 0.9])
    else:
        t = t[0] * np.linspace(1.0, rng.choice([0.5, 0.8, 0.99]), len(t))
    _rewrite(g["time_s"], t)


def store_bytes(rng: random.Random, workdir: Path) -> bytes:
    """A profile store: the shipped A100 store with structural mutations (values, dtypes,
    sizes, links, external storage, filter pipelines, wrong-typed values, negative keys,
    falling collective curves, tiny efficiencies) or corrupted bytes."""
    base = BASE_STORE.read_bytes()
    if rng.random() < 0.4:
        b = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            if rng.random() < 0.85:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            else:
                del b[rng.randrange(len(b)):]
                if not b:
                    break
        return bytes(b)
    buf = io.BytesIO(base)
    with h5py.File(buf, "a") as f:
        for _ in range(rng.randint(1, 3)):
            op = rng.random()
            try:
                if op < 0.25:
                    holder = _any_attr_holder(f, rng)
                    keys = [k for k in holder.attrs]
                    key = rng.choice(keys) if keys and rng.random() < 0.8 else "extra"
                    holder.attrs[key] = rng.choice(
                        [np.nan, np.inf, -1.0, 0.0, 1e300, 5e-324, "text", np.arange(3), 2**62,
                         "[[[[", "{\"a\": NaN}", "[" * 100 + "]" * 100, b"\xff\xfe", True, "1.0"])
                elif op < 0.33:
                    ds = rng.choice([d for d in _datasets(f) if d.dtype.kind in "iuf"])
                    _filtered(ds, rng.sample(FILTER_IDS, rng.randint(1, 3)))
                elif op < 0.41:
                    _typed_mutation(f, rng)
                elif op < 0.45:
                    keys = [d for d in _datasets(f) if d.name.startswith("/ops/") and d.dtype.kind in "iu"]
                    ds = rng.choice(keys)
                    v = ds[()].copy()
                    v[rng.randrange(len(v))] = rng.choice([-1, -2**31, -2**53 - 1])
                    _rewrite(ds, v)
                elif op < 0.49:
                    _curve_mutation(f, rng)
                elif op < 0.53:
                    names = [k for k in f["op_model"].attrs if "efficiency" in k or k == "peak_fraction"]
                    names += ["fp8_gemm_efficiency", "all_to_all_efficiency", "peak_fraction"]
                    f["op_model"].attrs[rng.choice(names)] = rng.choice(EFFICIENCIES)
                elif op < 0.65:
                    ds = rng.choice(_datasets(f))
                    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
                    n = ds.shape[0] if ds.ndim else 1
                    del parent[name]
                    choice = rng.randrange(7)
                    if choice == 0:
                        parent.create_dataset(name, data=np.full(n, np.nan))
                    elif choice == 1:
                        parent.create_dataset(name, data=np.full(n, -1.0))
                    elif choice == 2:
                        parent.create_dataset(name, data=np.array([b"x"] * n))
                    elif choice == 3:
                        parent.create_dataset(name, shape=(rng.choice([10**7 + 1, 2**31]),),
                                              dtype="f8", chunks=(1 << 16,), compression="gzip")
                    elif choice == 4:
                        parent.create_dataset(name, data=np.zeros((n, 2)))
                    elif choice == 5:
                        parent.create_dataset(name, data=np.full(n, 1e300))
                    else:
                        parent.create_dataset(name, data=np.arange(n, dtype=np.int8))
                elif op < 0.73:
                    target = workdir / "secret.h5"
                    with h5py.File(target, "w") as s:
                        s["x"] = np.arange(3.0)
                    g = rng.choice([f["ops"], f["collectives"], f])
                    g[f"link{rng.randrange(9)}"] = rng.choice(
                        [h5py.ExternalLink(str(target), "/x"), h5py.SoftLink("/ops"), h5py.SoftLink("/nope")])
                elif op < 0.8:
                    raw = workdir / "raw.bin"
                    raw.write_bytes(np.ones(8).tobytes())
                    ds = rng.choice(_datasets(f))
                    parent, name = ds.parent, ds.name.rsplit("/", 1)[1]
                    del parent[name]
                    parent.create_dataset(name, shape=(8,), dtype="f8", external=[(str(raw), 0, 64)])
                elif op < 0.87:
                    victim = rng.choice(["ops", "collectives", "op_model", "provenance", "peak_flops"])
                    if victim in f:
                        del f[victim]
                elif op < 0.93:
                    f.attrs["encoding-version"] = rng.choice([0, 2, -1, 10**6])
                else:
                    g = f["ops"]
                    for depth in range(rng.choice([3, 12])):
                        g = g.create_group(f"d{depth}")
            except (ValueError, KeyError, TypeError, OSError, RuntimeError):
                pass  # a mutation h5py refuses to write is simply skipped
    return buf.getvalue()


# --------------------------------------------------------------------------- oracle

def _finite(doc: Any) -> bool:
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return False
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return True


def classify(code: int | None, out: str, err: str, json_out: bool) -> tuple[str, str]:
    """Outcome of one run (see the module doc) and a note for the report."""
    lines = err.splitlines()
    if code == 2:
        if len(lines) == 1 and lines[0].startswith("vtrain: error: ") and "Traceback" not in err:
            return "clean_error", lines[0][:300]
        return "crash", f"exit 2 but stderr {err[:300]!r}"
    if code != 0:
        return "crash", f"exit {code}: {err[-500:]!r}"
    if json_out:
        try:
            doc = json.loads(out, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        except ValueError as exc:
            if "Infinity" in str(exc) or "NaN" in str(exc):
                return "non_finite", str(exc)[:200]
            return "crash", f"exit 0 but stdout is not JSON: {out[:200]!r}"
        if not _finite(doc):
            return "non_finite", "a non-finite number in the result"
    return "ok", ""


def invoke(argv: list[str]) -> tuple[int | None, str, str, str]:
    """Run ``vtrain ARGV`` in this process; return ``(exit status, stdout, stderr, crash
    note)``, the note non-empty (and the status None) when an exception escaped ``main``."""
    from core.sim import simulate as simulate_module
    from core.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 2
    except (CaseTimeout, KeyboardInterrupt):
        raise
    except BaseException as exc:  # noqa: BLE001 - anything escaping main is a crash
        return None, out.getvalue(), err.getvalue(), f"{type(exc).__name__}: {str(exc)[:300]}"
    finally:
        simulate_module._STORE_CACHE.clear()  # every case has its own store file
    return code, out.getvalue(), err.getvalue(), ""


def run_cli(argv: list[str]) -> tuple[str, str]:
    """Run ``vtrain ARGV`` in this process; return ``(outcome, note)`` (never raises but for
    ``KeyboardInterrupt`` and the caller's timeout)."""
    code, out, err, crash = invoke(argv)
    if crash:
        return "crash", crash
    return classify(code, out, err, "--json" in argv)


#: kind -> (generator of the file's bytes, suffix, command for a path)
KINDS: dict[str, tuple[Callable, str, Callable[[str], list[str]]]] = {
    "session": (lambda rng, wd: session_bytes(rng), ".json",
                lambda p: ["simulate", p, "--json"]),
    "authors": (lambda rng, wd: authors_bytes(rng), ".json",
                lambda p: ["simulate", p, "--json"]),
    "session_sweep": (lambda rng, wd: session_bytes(rng), ".json",
                      lambda p: ["sweep", p, "--json"]),
    "session_file": (lambda rng, wd: corrupted_session_bytes(rng), ".json",
                     lambda p: ["simulate", p, "--json"]),
    "store_file": (store_bytes, ".h5",
                   lambda p: ["simulate", str(ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json"),
                              "--profile", p, "--json"]),
    "csv_file": (lambda rng, wd: csv_bytes(rng), ".csv",
                 lambda p: ["validate", p, "--json", "--profile", str(BASE_STORE)]),
}


def run_case(kind: str, rng: random.Random, workdir: Path, index: int) -> tuple[str, str]:
    """Generate one input of ``kind`` in ``workdir`` and run its command (and, for the kinds
    in :data:`CHECKS`, judge what it wrote with that kind's own oracle)."""
    gen, suffix, command = KINDS[kind]
    path = workdir / f"{kind}_{index}{suffix}"
    path.write_bytes(gen(rng, workdir))
    try:
        if kind in CHECKS:
            return CHECKS[kind](command(str(path)), path, workdir)
        return run_cli(command(str(path)))
    finally:
        path.unlink(missing_ok=True)
        for extra in workdir.glob(f"{path.name}.*"):
            extra.unlink(missing_ok=True)


# --------------------------------------------------------------------------- third round
# Kinds the third round of hardening found (../shared/cases/s3): text written into a launch
# script, launch scripts that expand without bound, one-field deletions that silently change
# the model, and profile paths that cannot be resolved.

#: Text that is a command, a quote, an escape or a line break in some destination.
HOSTILE_TEXT = ["GPT\ntouch PWNED_nl #", "x'; touch PWNED_q; '", 'x"; touch PWNED_dq; "',
                "$(touch PWNED_subst)", "`touch PWNED_bt`", "; touch PWNED_semi", "\x1b]0;t\x07\x1b[2J",
                "a\u2028touch PWNED_ls", "a\u2029b", "a\u0085touch PWNED_nel", "a\rtouch PWNED_cr",
                "\\\ntouch PWNED_bsnl", "a\vb\fc", "\u202egpt", "[/x]", "é ü", "-- --x", "$HOME",
                "a\ttouch PWNED_tab"]


def full_session_doc(rng: random.Random) -> dict:
    """A complete session (every field written by :meth:`core.plan.session.Session.to_dict`) of a
    random model preset on 8 GPUs (t=2, d=4, b=1, B=8)."""
    from core.plan.parallel import ParallelPlan
    from core.plan.presets import MODEL_PRESETS
    from core.plan.session import Session
    from core.io.session import session_to_json
    name = rng.choice(sorted(MODEL_PRESETS))
    session = Session(model=MODEL_PRESETS[name],
                      plan=ParallelPlan(tensor_parallel=2, pipeline_parallel=1, data_parallel=4,
                                        micro_batch_size=1, global_batch_size=8))
    return json.loads(session_to_json(session))


def export_session_bytes(rng: random.Random) -> bytes:
    """A complete session whose free-text fields (and 1 in 4 times any string field) hold
    :data:`HOSTILE_TEXT`."""
    doc = full_session_doc(rng)
    doc["model"]["name"] = rng.choice(HOSTILE_TEXT)
    doc["notes"] = rng.choice(HOSTILE_TEXT)
    if rng.random() < 0.5:
        doc["cluster"]["gpu"] = rng.choice(HOSTILE_TEXT)
        doc["cluster"]["profile_path"] = str(BASE_STORE)
    if rng.random() < 0.25:
        section = rng.choice(["model", "plan", "cluster"])
        keys = [k for k, v in doc[section].items() if isinstance(v, str)]
        if keys:
            doc[section][rng.choice(keys)] = rng.choice(HOSTILE_TEXT)
    return dumps(doc)


def check_export(argv: list[str], path: Path, workdir: Path) -> tuple[str, str]:
    """``export megatron-args``: a clean refusal, or a script that ``bash -n`` accepts and that,
    run with a stub ``torchrun`` first on PATH, calls it exactly once and runs nothing else
    (no ``PWNED_*`` file appears); no raw control character reaches the terminal."""
    import re
    import shutil
    import subprocess

    code, out, err, crash = invoke(argv)
    if crash:
        return "crash", crash
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f\x85\u2028\u2029]", out + err):
        return "unescaped", "a raw control character in the output"
    outcome, note = classify(code, out, err, False)
    bash = shutil.which("bash")
    if outcome != "ok" or bash is None:
        return outcome, note
    run = workdir / f"{path.name}.run"
    (run / "bin").mkdir(parents=True, exist_ok=True)
    (run / "bin" / "torchrun").write_text('#!/bin/sh\necho x >> "$STUB_LOG"\n')
    (run / "bin" / "torchrun").chmod(0o755)
    script = run / "run.sh"
    script.write_text(out)
    env = {"PATH": f"{run / 'bin'}:/usr/bin:/bin", "STUB_LOG": str(run / "calls"), "LC_ALL": "C.UTF-8"}
    try:
        if subprocess.run([bash, "-n", str(script)], capture_output=True).returncode != 0:
            return "unescaped", "bash -n refuses the exported script"
        subprocess.run([bash, str(script)], cwd=run, env=env, capture_output=True, timeout=20)
        calls = (run / "calls").read_text().count("x") if (run / "calls").exists() else 0
        ran = sorted(p.name for p in run.rglob("*PWNED*"))
        if ran or calls != 1:
            return "unescaped", f"the script ran {ran or 'nothing else'}, torchrun {calls} times"
        return "ok", ""
    finally:
        shutil.rmtree(run, ignore_errors=True)


#: Launch-script lines that grow, loop or compute without bound, and a valid launch to wrap.
_LAUNCH_HEAD = ["#!/bin/bash", "GPUS=8", "TP=2", "PP=2"]
_LAUNCH_TAIL = ["torchrun --nproc-per-node $GPUS pretrain_gpt.py --num-layers 24 --hidden-size 2048 \\",
                "  --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 \\",
                "  --micro-batch-size 1 --global-batch-size 16 --tensor-model-parallel-size $TP \\",
                "  --pipeline-model-parallel-size $PP --bf16 --train-iters 10 --vocab-size 50257"]


def _hostile_launch_line(rng: random.Random) -> list[str]:
    kind = rng.randrange(9)
    n = rng.choice([1, 5, 20, 40, 200])
    if kind == 0:  # doubling
        return ["A=x"] + ["A=$A$A"] * n + ["echo $A"]
    if kind == 1:  # arithmetic beyond int64 or with many terms
        return [f"X=$(( {rng.choice(['9' * rng.choice([18, 19, 40, 4300]), '2**62', '(1<<62)*4'])} "
                f"* {rng.choice(['9' * 30, '2', '10**18'])} ))", "echo $X"]
    if kind == 2:
        return ["X=$(( " + " + ".join(["1"] * rng.choice([10, 600, 100_000])) + " ))"]
    if kind == 3:  # arrays that append, with expansion
        return ["ARGS=()"] + ["ARGS+=(--x $A ${ARGS[@]})"] * n
    if kind == 4:  # nested substitutions and quotes
        return ['A="$(echo "$(echo "$(echo x)")")"', "B='unterminated", "C=${A:-${B:-${C}}}"]
    if kind == 5:  # a brace expansion and a loop
        return ["for i in {1..100000}; do A=$A$i; done", "echo {a,b}{c,d}{e,f}" * rng.choice([1, 30])]
    if kind == 6:  # a long line and odd bytes
        return ["A=" + "y" * rng.choice([1000, 2_000_000]), "B=\x00\xff", "--tensor-model-parallel-size 9" * 3]
    if kind == 7:  # recursion through variables
        return ["A='$B'", "B='$A'", "echo $A $B", "eval echo $A"]
    return [f"export X{i}=$X{i-1}$X{i-1}" for i in range(1, n + 1)]


def launch_bytes(rng: random.Random) -> bytes:
    """A launch script: a valid ``torchrun pretrain_gpt.py`` launch with 1 to 3 hostile
    blocks (unbounded expansion, arithmetic, arrays, quotes, loops) before it."""
    lines = list(_LAUNCH_HEAD)
    for _ in range(rng.randint(1, 3)):
        lines += _hostile_launch_line(rng)
    text = "\n".join(lines + _LAUNCH_TAIL) + "\n"
    return text.encode("utf-8", "surrogateescape")


#: Where :func:`deletion_bytes` writes the complete session that :func:`check_deletion` runs.
COMPLETE_SESSION = "complete_session.json"


def deletion_bytes(rng: random.Random, workdir: Path) -> bytes:
    """A complete session less one model field; the complete session is written to ``workdir
    / COMPLETE_SESSION`` for :func:`check_deletion`. (Plan fields are left alone: a plan field
    not given takes Megatron-LM's default by design, docs/simulator.md "Inputs".)"""
    doc = full_session_doc(rng)
    (workdir / COMPLETE_SESSION).write_bytes(dumps(doc))
    del doc["model"][rng.choice(sorted(doc["model"]))]
    return dumps(doc)


def check_deletion(argv: list[str], path: Path, workdir: Path) -> tuple[str, str]:
    """A session less one field is refused cleanly, or it simulates the very model and plan of
    the complete session (same parameter count and iteration time); anything else is a
    ``silent_model``: a different model run with confidence."""
    code, out, err, crash = invoke(argv)
    if crash:
        return "crash", crash
    outcome, note = classify(code, out, err, True)
    if outcome != "ok":
        return outcome, note
    got = json.loads(out)
    code_full, out_full, _err, crash = invoke(["simulate", str(workdir / COMPLETE_SESSION), "--json"])
    if crash or code_full != 0:
        return "crash", f"the complete session did not simulate: {crash or code_full}"
    want = json.loads(out_full)
    same = (got["num_parameters"] == want["num_parameters"]
            and abs(got["iteration_time_s"] - want["iteration_time_s"])
            <= 1e-9 * want["iteration_time_s"])
    return ("ok", "") if same else (
        "silent_model", f"exit 0 with {got['num_parameters']:,} parameters, "
                        f"{got['iteration_time_s']:.4g} s; the complete session has "
                        f"{want['num_parameters']:,}, {want['iteration_time_s']:.4g} s")


def path_session_bytes(rng: random.Random, workdir: Path) -> bytes:
    """A session whose ``cluster.profile_path`` is a hostile string or a link in ``workdir``
    (a loop, a dangling link, a link to a folder, to /proc/self/environ or to a FIFO)."""
    import os
    doc = json.loads(json.dumps(BASE_SESSION))
    links = workdir / "links"
    links.mkdir(exist_ok=True)
    choice = rng.randrange(6)
    target = links / f"p{rng.randrange(10**9)}.h5"
    try:
        if choice == 0:
            os.symlink(target.name, target)  # a link to itself: a loop
        elif choice == 1:
            os.symlink(links / "nowhere.h5", target)
        elif choice == 2:
            os.symlink(workdir, target)
        elif choice == 3:
            os.symlink("/proc/self/environ", target)
        elif choice == 4:
            os.mkfifo(target)
        else:
            target = rng.choice(HOSTILE_PATHS)
    except OSError:
        target = rng.choice(HOSTILE_PATHS)
    doc["cluster"]["profile_path"] = str(target)
    return dumps(doc)


def check_path(argv: list[str], path: Path, workdir: Path) -> tuple[str, str]:
    """A hostile profile path: a clean refusal that never prints where a link points."""
    code, out, err, crash = invoke(argv)
    if crash:
        return "crash", crash
    if "environ" in err and "/proc/self/environ" not in path.read_text():
        return "crash", "the message shows where a link points"
    return classify(code, out, err, "--json" in argv)



def pinned_session_bytes(rng: random.Random) -> bytes:
    """A complete session (the shipped 1.3B example) whose ``compare.pinned`` plan (model,
    plan, cluster and cost) is mutated (:func:`mutate_doc`), for ``vtrain diff SESSION``."""
    doc = json.loads((ROOT / "resources" / "examples" / "gpt3_1.3b_single_node.json").read_text())
    pinned = {k: doc[k] for k in ("model", "plan", "cluster", "cost")}
    doc["compare"] = {"pinned": mutate_doc(pinned, rng)}
    return dumps(doc)


KINDS.update({
    # vtrain diff: the pinned plan (A) of one session, and a mutated session (B) against the
    # shipped example (A); --json checked as every kind's is
    "diff_pinned": (lambda rng, wd: pinned_session_bytes(rng), ".json",
                    lambda p: ["diff", p, "--json"]),
    "diff_pair": (lambda rng, wd: session_bytes(rng), ".json",
                  lambda p: ["diff", str(ROOT / "resources" / "examples" /
                                         "gpt3_1.3b_single_node.json"), p, "--json"]),
    "export": (lambda rng, wd: export_session_bytes(rng), ".json",
               lambda p: ["export", "megatron-args", p]),
    "launch": (lambda rng, wd: launch_bytes(rng), ".sh",
               lambda p: ["import", "megatron-args", p, "--out", p + ".out.json"]),
    "deletion": (deletion_bytes, ".json", lambda p: ["simulate", p, "--json"]),
    "profile_path": (path_session_bytes, ".json", lambda p: ["simulate", p, "--json"]),
})
#: kind -> oracle run instead of :func:`run_cli`: ``(argv, case path, workdir) -> (outcome, note)``
CHECKS: dict[str, Callable[[list[str], Path, Path], tuple[str, str]]] = {
    "export": check_export, "deletion": check_deletion, "profile_path": check_path}
