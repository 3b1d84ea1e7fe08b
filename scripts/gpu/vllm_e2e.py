"""exactfuse's vLLM plugin in a real ``vllm.LLM`` engine: the same greedy generation with and without it.

    EXACTFUSE_OUT=out python3 scripts/gpu/vllm_e2e.py [--models llama,llama_gptq,lfm2] [--tokens 32] [--decode 128]
    bash scripts/gpu/run.sh vllm [ARGS...]            # the same, as a named step (results in results/)

For each tiny random checkpoint it builds (Llama; the same Llama quantized with exactfuse.integrations.gptq;
an LFM2 ShortConv model), it starts one process per configuration, ``VLLM_PLUGINS=""`` (vLLM's own kernels)
and ``VLLM_PLUGINS=exactfuse``, each running ``vllm.LLM(...)`` (enforce_eager, Triton attention, no tokenizer,
token-id prompts) and reports: greedy tokens equal, the largest difference of the chosen tokens' logprobs,
how often each exactfuse op and each stand-in vLLM op ran, and decode tokens/s at batch 1 and 32.
vLLM's Python files come from ``.vllm/`` (scripts/vllm_wheels.sh) unless vllm is installed; the compiled ops
they need come from scripts/gpu/vllm_standin.py. Results: ``vllm_e2e.json`` and ``vllm_e2e.txt`` in
``EXACTFUSE_OUT`` (else ``OUT``, else /tmp/exactfuse-run/results).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
MODELS = ("llama", "llama_gptq", "lfm2")
COUNTED = ("silu_and_mul", "gelu_and_mul", "w4a16_gemm", "causal_conv1d", "causal_conv1d_update")


# --------------------------------------------------------------------------------------- checkpoints
def build_checkpoint(kind: str, path: Path) -> Path:
    """A tiny random bf16 checkpoint of ``kind`` at ``path`` (config.json + model.safetensors)."""
    import torch
    import transformers

    if (path / "config.json").exists():
        return path
    torch.manual_seed(0)
    common = dict(vocab_size=2048, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=False,
                  initializer_range=0.08)  # fmt: skip
    if kind == "lfm2":
        config = transformers.Lfm2Config(**common, num_hidden_layers=4, layer_types=["conv", "full_attention"] * 2,
                                         conv_L_cache=3, block_auto_adjust_ff_dim=False,
                                         # the widths LFM2 checkpoints carry and vLLM's model reads; transformers
                                         # derives them from hidden_size and no longer writes them
                                         conv_dim=common["hidden_size"], conv_dim_out=common["hidden_size"],
                                         block_dim=common["hidden_size"])  # fmt: skip
        model = transformers.Lfm2ForCausalLM(config)
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**common, num_hidden_layers=2))
    model = model.to(torch.bfloat16).eval()
    if kind == "llama_gptq":
        from exactfuse.integrations.gptq import save_gptq

        save_gptq(model, path, group_size=128, sym=True)
        model.config.quantization_config = {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False,
                                            "sym": True, "checkpoint_format": "gptq"}  # fmt: skip
        model.config.architectures = [type(model).__name__]
        model.config.save_pretrained(path)
    else:
        model.save_pretrained(path, safe_serialization=True)
    return path


# --------------------------------------------------------------------------------------------- worker
def _count_exactfuse_calls():
    """Wrap the exactfuse functions the plugin calls with counters (it looks them up at call time)."""
    import collections

    import exactfuse

    calls = collections.Counter()
    for name in COUNTED:
        original = getattr(exactfuse, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        setattr(exactfuse, name, counted)
    return calls


def worker(spec: dict) -> dict:
    """One engine, one configuration: greedy tokens, logprobs, call counts, decode speed."""
    calls = _count_exactfuse_calls()
    import torch
    import vllm_standin
    from vllm import LLM, SamplingParams

    llm = LLM(model=spec["model"], dtype="bfloat16", enforce_eager=True, attention_backend="TRITON_ATTN",
              skip_tokenizer_init=True, gpu_memory_utilization=0.25, max_model_len=1024, max_num_seqs=32,
              seed=0)  # fmt: skip
    g = torch.Generator().manual_seed(1)
    prompts = [{"prompt_token_ids": torch.randint(3, 2000, (int(n),), generator=g).tolist()}
               for n in torch.randint(4, 48, (32,), generator=g)]  # fmt: skip

    def params(n: int, logprobs: int | None = None):
        return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, detokenize=False, logprobs=logprobs)

    before = dict(calls), dict(vllm_standin.CALLS)
    outs = llm.generate(prompts, params(spec["tokens"], logprobs=0), use_tqdm=False)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    chosen = [zip(o.outputs[0].token_ids, o.outputs[0].logprobs, strict=True) for o in outs]
    logprobs = [[lp[t].logprob for t, lp in seq] for seq in chosen]
    counts = {k: v - before[0].get(k, 0) for k, v in calls.items()}
    standin = {k: v - before[1].get(k, 0) for k, v in vllm_standin.CALLS.items()}
    speed = {}
    for batch in (1, 32):
        llm.generate(prompts[:batch], params(8), use_tqdm=False)  # warm: every shape this batch takes
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        llm.generate(prompts[:batch], params(spec["decode"]), use_tqdm=False)
        torch.cuda.synchronize()
        speed[f"batch{batch}_tokens_per_s"] = batch * spec["decode"] / (time.perf_counter() - t0)
    return {"tokens": tokens, "logprobs": logprobs, "exactfuse_calls": counts, "standin_calls": standin, **speed}


# --------------------------------------------------------------------------------------------- driver
def _env(site: Path, plugin: bool) -> dict:
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(site), str(HERE), env.get("PYTHONPATH", "")]
    env.update(PYTHONPATH=os.pathsep.join(p for p in paths if p), VLLM_PLUGINS="exactfuse" if plugin else "",
               VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_USE_FLASHINFER_SAMPLER="0", TOKENIZERS_PARALLELISM="false",
               # the v2 model runner maps pinned host buffers into the device (_C.get_cuda_view_from_cpu_tensor),
               # which the Python stand-in cannot provide
               VLLM_USE_V2_MODEL_RUNNER="0",
               VLLM_DISABLED_KERNELS="CutlassW4A8LinearKernel,MacheteLinearKernel,AllSparkLinearKernel,"
               "MarlinLinearKernel,ConchLinearKernel,ExllamaLinearKernel")  # fmt: skip
    return env


def run_config(site: Path, model: Path, plugin: bool, args, log: Path) -> dict:
    spec = {"model": str(model), "tokens": args.tokens, "decode": args.decode}
    out = log.with_suffix(".json")
    cmd = [sys.executable, __file__, "--worker", json.dumps(spec), "--result", str(out)]
    with log.open("w") as f:
        try:
            rc = subprocess.run(cmd, env=_env(site, plugin), stdout=f, stderr=subprocess.STDOUT, timeout=args.timeout)
            rc = rc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    if rc or not out.exists():
        tail = log.read_text()[-3000:]
        return {"error": f"rc={rc}", "log_tail": tail}
    return json.loads(out.read_text())


def compare(base: dict, plug: dict) -> dict:
    rows = len(base["tokens"])
    pairs = list(zip(base["tokens"], plug["tokens"], strict=True))
    equal = sum(a == b for a, b in pairs)
    first = [next((i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y), None) for a, b in pairs]
    # logprobs compared while the two sequences agree (after a divergence the prefixes differ)
    diffs = [
        abs(x - y)
        for la, lb, f in zip(base["logprobs"], plug["logprobs"], first, strict=True)
        for i, (x, y) in enumerate(zip(la, lb, strict=True))
        if f is None or i <= f
    ]
    return {"sequences": rows, "tokens_equal": equal, "first_mismatch": [f for f in first if f is not None][:8],
            "max_logprob_diff": max(diffs, default=0.0),
            "speedup_batch1": plug["batch1_tokens_per_s"] / base["batch1_tokens_per_s"],
            "speedup_batch32": plug["batch32_tokens_per_s"] / base["batch32_tokens_per_s"]}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--tokens", type=int, default=32, help="greedy tokens per sequence compared")
    p.add_argument("--decode", type=int, default=128, help="tokens per sequence in the timed decode")
    p.add_argument("--timeout", type=int, default=240, help="seconds per engine process")
    p.add_argument("--site", default="/tmp/exactfuse-vllm-site", help="where vLLM's Python files are unpacked")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        Path(args.result).write_text(json.dumps(worker(json.loads(args.worker))))
        return 0
    out = Path(os.environ.get("EXACTFUSE_OUT") or os.environ.get("OUT") or "/tmp/exactfuse-run/results")
    out.mkdir(parents=True, exist_ok=True)
    sys.path[:0] = [str(HERE), str(ROOT / "src")]
    import vllm_standin

    archives = sorted((ROOT / ".vllm").glob("vllm-*-py.tar.xz"))
    if not archives:
        print("vllm_e2e: no .vllm/vllm-*-py.tar.xz: run scripts/vllm_wheels.sh on a machine with PyPI")
        return 2
    site = vllm_standin.prepare(Path(args.site), archives[-1])
    results, lines = {}, []
    for kind in args.models.split(","):
        model = build_checkpoint(kind, Path("/tmp/exactfuse-vllm-models") / kind)
        runs = {name: run_config(site, model, plugin, args, out / f"vllm_e2e-{kind}-{name}.log")
                for name, plugin in (("vllm", False), ("exactfuse", True))}  # fmt: skip
        entry = {"runs": {k: {f: v for f, v in r.items() if f not in ("tokens", "logprobs")} for k, r in runs.items()}}
        if all("error" not in r for r in runs.values()):
            entry["compare"] = compare(runs["vllm"], runs["exactfuse"])
        results[kind] = entry
        lines.append(f"== {kind}: {json.dumps(entry.get('compare', 'failed'))}")
        for name, r in entry["runs"].items():
            lines.append(f"   {name}: {json.dumps({k: v for k, v in r.items() if k != 'log_tail'})}")
            if "log_tail" in r:
                lines.append("   " + r["log_tail"][-1500:].replace("\n", "\n   "))
        print("\n".join(lines[-3:]), flush=True)
    (out / "vllm_e2e.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "vllm_e2e.txt").write_text("\n".join(lines) + "\n")
    return 0 if all("compare" in e for e in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
