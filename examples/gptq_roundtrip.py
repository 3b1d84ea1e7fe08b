"""Quantize a small Llama to a GPTQ directory, load it back with W4A16 layers, and generate.

python examples/gptq_roundtrip.py /tmp/tiny-gptq
"""

from __future__ import annotations

import sys

import torch
import transformers

from exactfuse.integrations.gptq import load_gptq, save_gptq


def main(path: str) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = transformers.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(device, torch.float16).eval()
    print("quantized:", len(save_gptq(model, path, group_size=128)), "projections ->", path)
    loaded = transformers.AutoModelForCausalLM.from_config(config).to(device, torch.float16).eval()
    print("loaded as W4A16Linear:", len(load_gptq(loaded, path)))
    ids = torch.randint(0, config.vocab_size, (1, 8), device=device)
    with torch.no_grad():
        out = loaded.generate(ids, max_new_tokens=16, do_sample=False)
    print("greedy tokens:", out[0, 8:].tolist())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/exactfuse-gptq")
