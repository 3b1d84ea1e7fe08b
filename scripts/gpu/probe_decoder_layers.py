"""A Llama-shaped model's decoder layers with and without exactfuse, bf16 and W4A16, under CUDA graphs.

Usage: PYTHONPATH=src python scripts/gpu/probe_decoder_layers.py [--tiny] [--generate [eager,compiled]] [--no-layers]

Model: hidden 4096, intermediate 14336, 32 query / 8 KV heads, 4 decoder layers, vocab 32000, random
weights (``--tiny``: a small one, for a check on the CPU). Variants, each checked before it is timed:

- ``bf16``: the model as transformers builds it; ``exact``: ``apply(model)`` (logits bit-equal);
  ``fast``: ``apply(model, exact=False)`` (fused gate+up GEMM; within a GEMM's rounding);
- ``w4a16``: every decoder ``nn.Linear`` a ``W4A16Linear`` (group 128, symmetric, round to nearest);
  ``dequant``: the same model with each ``W4A16Linear`` replaced by an ``nn.Linear`` of its dequantized
  weight, the baseline W4A16 is measured against; ``w4a16-exact``: ``apply`` on the W4A16 model
  (``silu_mul`` on the two W4A16 projections' outputs, logits bit-equal); ``w4a16-fragment``: the W4A16
  model with every layer in the fragment layout (``W4A16Linear(layout="fragment")``, ``w4a16_gemm_packed``);
  ``w4a16-auto``: each layer in the layout ``layout="auto"`` takes (``W4A16Linear.preferred_layout``: the
  fragment layout on the MLPs' projections here, the GPTQ one on the attention's smaller ones).

Rows: the decoder layers' forward (rotary embedding given, no final norm or head) at batch 1, 16 and 64 as
one decode step over a 1024-token context (a fixed KV buffer of 1025 slots per layer, the new token
written into the last), and at 2048 prefill tokens (batch 1, causal, no cache); the median of CUDA-graph
replays. ``mlp %``: the four MLPs alone (the same inputs) over the layers; ``mlp vs bf16``: the bf16 model's
MLP time over the variant's (the W4A16 targets are read off it). With ``--generate``:
``generate`` tokens/s (32 new tokens after 16 prompt tokens) at batch 1, 16 and 64, bf16, exact, fast and
the two W4A16 models, eager (a dynamic cache) and compiled (``cache_implementation="static"``:
transformers compiles the decode step on a CUDA device); each after a call of the same length, in two
rounds. ``--no-layers`` skips the layer rows (generate only).
Result: benchmarks/results/h200/transformers_decoder_layers.txt (``--no-layers``: transformers_generate.txt).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
import transformers
from common import emit
from torch import nn

from exactfuse.integrations.transformers import apply
from exactfuse.layers import W4A16Linear

DECODE_CONTEXT = 1024
PREFILL = 2048


class FixedContext:
    """A KV cache of ``context + 1`` slots per layer: each step writes its one token into the last slot,
    so a captured decode step replays over the same context."""

    def __init__(self, config, batch: int, context: int, device, dtype, gen):
        kv, d = config.num_key_value_heads, config.hidden_size // config.num_attention_heads
        shape = (batch, kv, context + 1, d)
        self.keys = [
            torch.randn(shape, device=device, dtype=dtype, generator=gen) for _ in range(config.num_hidden_layers)
        ]
        self.values = [
            torch.randn(shape, device=device, dtype=dtype, generator=gen) for _ in range(config.num_hidden_layers)
        ]

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        self.keys[layer_idx][:, :, -1:].copy_(key_states)
        self.values[layer_idx][:, :, -1:].copy_(value_states)
        return self.keys[layer_idx], self.values[layer_idx]


def build(tiny: bool, device, dtype):
    sizes = dict(hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=2,
                 vocab_size=512) if tiny else dict(hidden_size=4096, intermediate_size=14336,
                 num_attention_heads=32, num_key_value_heads=8, vocab_size=32000)  # fmt: skip
    config = transformers.LlamaConfig(**sizes, num_hidden_layers=4, max_position_embeddings=4096)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(device, dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.02)
            else:  # norms: around their init
                p.add_(torch.randn_like(p) * 0.02)
    return model


def quantized(model: nn.Module) -> tuple[nn.Module, nn.Module]:
    """(the W4A16 model, the same with every W4A16Linear as an nn.Linear of its dequantized weight)."""
    w4, dense = copy.deepcopy(model), copy.deepcopy(model)
    for name, linear in [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and ".layers." in n]:
        layer = W4A16Linear.from_linear(linear, layout="gptq").to(linear.weight.device)
        parent, attr = name.rsplit(".", 1)
        setattr(w4.get_submodule(parent), attr, layer)
        plain = nn.Linear(linear.in_features, linear.out_features, bias=linear.bias is not None)
        plain = plain.to(linear.weight.device, linear.weight.dtype)
        with torch.no_grad():
            plain.weight.copy_(layer.dense_weight().t())
            if linear.bias is not None:
                plain.bias.copy_(layer.bias)
        setattr(dense.get_submodule(parent), attr, plain)
    return w4, dense


def layers_call(model, hidden, cache):
    """The decoder layers over ``hidden`` [B, S, H]: decode (one token after the cache's context) or prefill."""
    inner = model.model
    B, S, _ = hidden.shape
    start = DECODE_CONTEXT if cache is not None else 0
    position_ids = torch.arange(start, start + S, device=hidden.device).expand(B, S)
    embeddings = inner.rotary_emb(hidden, position_ids)

    def run(mlp_only: bool = False):
        h = hidden
        for layer in inner.layers:
            if mlp_only:
                h = layer.mlp(h)
            else:
                h = layer(h, position_ids=position_ids, past_key_values=cache, position_embeddings=embeddings)
        return h

    def parts() -> str:
        """Which of the first layer's parts, run twice on the same input, differ: where a baseline that
        does not repeat itself loses its bits."""
        layer = inner.layers[0]
        normed = layer.input_layernorm(hidden)
        pieces = {
            "input_layernorm": lambda: layer.input_layernorm(hidden),
            "self_attn": lambda: layer.self_attn(
                normed, position_embeddings=embeddings, attention_mask=None, past_key_values=cache
            )[0],
            "mlp": lambda: layer.mlp(normed),
        }
        return ", ".join(f"{n} {'repeats' if torch.equal(f(), f()) else 'DIFFERS'}" for n, f in pieces.items())

    run.parts = parts
    return run


GENERATE_MODES = {"eager": {}, "compiled": {"cache_implementation": "static"}}
GENERATE_VARIANTS = ("bf16", "exact", "fast", "w4a16", "w4a16-fragment")


def generate_rates(models: dict, config, device, gen, modes=tuple(GENERATE_MODES)) -> list[str]:
    """``generate`` tokens/s of :data:`GENERATE_VARIANTS` in each of ``modes``, at batch 1, 16 and 64."""
    torch._dynamo.config.cache_size_limit = 64  # five models x three batch sizes share the forward's code
    lines = []
    for mode in modes:
        extra = GENERATE_MODES[mode]
        for B in (1, 16, 64):
            ids = torch.randint(0, config.vocab_size, (B, 16), device=device, generator=gen)
            kw = dict(attention_mask=torch.ones_like(ids), pad_token_id=0, do_sample=False, max_new_tokens=32,
                      min_new_tokens=32, **extra)  # fmt: skip
            rates: dict[str, list[float]] = {}
            for name in GENERATE_VARIANTS * 2:  # two rounds, the faster kept: no order effect
                m = models[name]
                m.generate(ids, **kw)  # the same length: a static cache of the same size, compiled once
                if device == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                m.generate(ids, **kw)
                if device == "cuda":
                    torch.cuda.synchronize()
                rates.setdefault(name, []).append(32 * B / (time.perf_counter() - start))
            for name, both in rates.items():
                lines.append(f"generate B{B} {mode} | {name} | {max(both):,.0f} tokens/s (rounds: "
                             f"{', '.join(f'{r:,.0f}' for r in both)})")  # fmt: skip
                print(lines[-1], flush=True)
    return lines


def _same(a: torch.Tensor, b: torch.Tensor) -> str:
    if torch.equal(a, b):
        return "bit-equal"
    return f"DIFFERS in {int((a != b).sum())} elements, max |d| {float((a - b).abs().max()):.2g}"


def timer(device):
    if device == "cuda":
        from exactfuse.bench.timing import cudagraph_timer

        return cudagraph_timer(rep_ms=50)

    def cpu(fn):
        fn()
        start = time.perf_counter()
        for _ in range(3):
            fn()
        return (time.perf_counter() - start) / 3 * 1e3

    return cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiny", action="store_true", help="a small model (a check on the CPU)")
    parser.add_argument("--generate", nargs="?", const="eager,compiled", metavar="MODES",
                        help="also generate tokens/s in these modes (default eager,compiled)")  # fmt: skip
    parser.add_argument("--no-layers", action="store_true", help="skip the layer rows (with --generate)")
    args = parser.parse_args()
    modes = tuple(args.generate.split(",")) if args.generate else ()
    if any(m not in GENERATE_MODES for m in modes):
        parser.error(f"--generate: modes are {', '.join(GENERATE_MODES)}, got {args.generate}")
    if args.no_layers and not modes:
        parser.error("--no-layers needs --generate")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16  # W4A16 takes fp16 or bf16 activations; the CPU runs bf16 too
    base = build(args.tiny, device, dtype)
    config = base.config
    exact, fast = copy.deepcopy(base), copy.deepcopy(base)
    apply(exact)
    apply(fast, exact=False)
    w4, dense = quantized(base)
    w4_exact = copy.deepcopy(w4)
    apply(w4_exact)
    w4_fragment, w4_auto = copy.deepcopy(w4), copy.deepcopy(w4)
    for m in w4_fragment.modules():
        if isinstance(m, W4A16Linear):
            m.repack()
    for m in w4_auto.modules():
        if isinstance(m, W4A16Linear) and m.preferred_layout() == "fragment":
            m.repack()
    models = {"bf16": base, "exact": exact, "fast": fast, "dequant": dense, "w4a16": w4, "w4a16-exact": w4_exact,
              "w4a16-fragment": w4_fragment, "w4a16-auto": w4_auto}  # fmt: skip
    time_ms = timer(device)
    gen = torch.Generator(device=device).manual_seed(1)
    shapes = [("decode B1", 1, 1), ("decode B16", 16, 1), ("decode B64", 64, 1), (f"prefill {PREFILL}", 1, PREFILL)]
    lines = [f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}, torch {torch.__version__}, "
             f"transformers {transformers.__version__}; hidden {config.hidden_size}, intermediate "
             f"{config.intermediate_size}, {config.num_hidden_layers} layers, {dtype}"]  # fmt: skip
    if not args.no_layers:
        lines.append("shape | variant | layers µs | mlp µs | mlp % | vs its baseline | mlp vs bf16 | check")
    failed = []
    with torch.no_grad():
        for label, B, S in shapes if not args.no_layers else ():
            hidden = torch.randn((B, S, config.hidden_size), device=device, dtype=dtype, generator=gen)
            cache = FixedContext(config, B, DECODE_CONTEXT, device, dtype, gen) if S == 1 else None
            calls = {name: layers_call(m, hidden, cache) for name, m in models.items()}
            outs = {name: call() for name, call in calls.items()}
            repeat = {name: calls[name]() for name in ("bf16", "w4a16")}  # is the baseline itself repeatable?
            checks = {
                "bf16": "repeats bit for bit"
                if torch.equal(repeat["bf16"], outs["bf16"])
                else f"NOT REPEATABLE (layer 0: {calls['bf16'].parts()})",
                "exact": _same(outs["exact"], outs["bf16"]),
                "fast": f"max |d| {float((outs['fast'] - outs['bf16']).abs().max()):.2g} vs bf16",
                "dequant": "",
                "w4a16": f"max |d| {float((outs['w4a16'] - outs['dequant']).abs().max()):.2g} vs dequant"
                + ("" if torch.equal(repeat["w4a16"], outs["w4a16"]) else ", NOT REPEATABLE"),
                "w4a16-exact": _same(outs["w4a16-exact"], outs["w4a16"]),
                **{
                    name: f"max |d| {float((outs[name] - outs['dequant']).abs().max()):.2g} vs dequant"
                    for name in ("w4a16-fragment", "w4a16-auto")
                },
            }
            if checks["exact"] != "bit-equal" or checks["w4a16-exact"] != "bit-equal":
                failed.append(f"{label}: exact mode changed the layers' output: exact {checks['exact']}; "
                              f"w4a16-exact {checks['w4a16-exact']}; bf16 {checks['bf16']}")  # fmt: skip
                print(failed[-1], flush=True)
            times = {name: time_ms(call) * 1e3 for name, call in calls.items()}
            mlps = {name: time_ms(lambda c=call: c(mlp_only=True)) * 1e3 for name, call in calls.items()}
            baseline = {"exact": "bf16", "fast": "bf16", "w4a16": "dequant", "dequant": "bf16", "w4a16-exact": "w4a16",
                        "w4a16-fragment": "w4a16", "w4a16-auto": "w4a16"}  # fmt: skip
            for name in models:
                ref = baseline.get(name)
                ratio = f"{times[ref] / times[name]:.3f}x {ref}" if ref else ""
                lines.append(f"{label} | {name} | {times[name]:.1f} | {mlps[name]:.1f} | "
                             f"{100 * mlps[name] / times[name]:.0f}% | {ratio} | {mlps['bf16'] / mlps[name]:.2f}x | "
                             f"{checks[name]}")  # fmt: skip
                print(lines[-1], flush=True)
        if modes:
            lines += generate_rates(models, config, device, gen, modes)
    emit("transformers_generate.txt" if args.no_layers else "transformers_decoder_layers.txt", lines + failed)
    if failed:
        raise SystemExit("\n".join(failed))


if __name__ == "__main__":
    main()
