"""Build a small Llama from a config, put exactfuse into it, check the logits, time a decode step.

python examples/transformers_apply.py            # CUDA if present (bf16), else the CPU (fp32)
"""

from __future__ import annotations

import time

import torch
import transformers

from exactfuse.integrations import transformers as xf


def main() -> None:
    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    config = transformers.LlamaConfig(hidden_size=2048 if cuda else 256, intermediate_size=8192 if cuda else 512,
                                      num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=8,
                                      vocab_size=32000)  # fmt: skip
    model = transformers.AutoModelForCausalLM.from_config(config).to(device, dtype).eval()
    ids = torch.randint(0, config.vocab_size, (1, 64), device=device)
    with torch.no_grad():
        reference = model(input_ids=ids).logits
        report = xf.apply(model)
        print(report)
        patched = model(input_ids=ids).logits
        print("logits bit-equal:", torch.equal(patched, reference))

        def step():
            return model(input_ids=ids[:, -1:]).logits

        for _ in range(3):
            step()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(20):
            step()
        if cuda:
            torch.cuda.synchronize()
        print(f"one-token forward (eager, no KV cache): {1e3 * (time.perf_counter() - start) / 20:.2f} ms")
    xf.revert(model)


if __name__ == "__main__":
    main()
