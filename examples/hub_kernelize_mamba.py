"""Build a small Mamba from a config, kernelize its conv functions to exactfuse through Hugging Face's
``kernels``, check the logits and the greedy tokens, then give the PyTorch path back.

python examples/hub_kernelize_mamba.py      # needs CUDA and `pip install 'exactfuse[hub]'`
"""

from __future__ import annotations

import torch
import transformers
from kernels import Mode, kernelize, use_kernel_mapping

from exactfuse.integrations.hub import kernel_mapping


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("kernelize takes accelerator devices only: run this on a CUDA machine")
    config = transformers.MambaConfig(hidden_size=1024, state_size=16, num_hidden_layers=4, vocab_size=32000)
    model = transformers.MambaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, config.vocab_size, (2, 64), device="cuda")
    greedy = {"max_new_tokens": 16, "min_new_tokens": 16, "do_sample": False}
    with torch.no_grad():
        reference, reference_tokens = model(ids).logits, model.generate(ids, **greedy)
        with use_kernel_mapping(kernel_mapping()):
            kernelize(model, mode=Mode.INFERENCE, device="cuda")
        print("logits bit-equal:", torch.equal(model(ids).logits, reference))
        print("greedy tokens equal:", torch.equal(model.generate(ids, **greedy), reference_tokens))
        # transformers' conv functions are shared by every Mamba model in the process: restore them
        with use_kernel_mapping({}, inherit_mapping=False):
            kernelize(model, mode=Mode.INFERENCE, device="cuda")


if __name__ == "__main__":
    main()
