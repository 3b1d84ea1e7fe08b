"""exactfuse in Hugging Face transformers models: ``apply(model)`` patches one model instance.

Nothing global changes: no class is patched and no transformers module is touched. ``apply`` walks the
model, recognizes gated MLPs and MoE experts by their structure (projections and parameters of the
expected shapes, an activation recognized by what it computes on a probe tensor, not by its class
name), and swaps each for an exactfuse module that holds the *same* parameter objects under the same
names, so ``state_dict()`` and checkpoints are unchanged. Before a swap is kept, the new module runs
beside the original on two rows and must give the same bits; a module that does not (a transformers
release that changed the forward, an experts backend other than the eager loop) is left, and the
report says why. ``revert(model)`` puts the original module objects back.

``exact=True`` keeps the model's numerics: the gate and up projections stay two GEMMs whose outputs
feed ``silu_mul`` / ``gelu_mul`` as two tensors (no join copy; Gemma3n's activation-sparse layers join
them for ``gelu_and_mul_sparse``), and the activation op is bit-equal to the eager expression on CUDA.
``exact=False`` also fuses the two projections into one ``[2I, H]`` GEMM whose output feeds
``silu_and_mul`` / ``gelu_and_mul``: the same products, in the GEMM library's order for the wider
matrix, so within a GEMM's rounding of the model's (bit-equal on the shapes measured, not promised).
See ``docs/transformers.md``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from exactfuse.layers import W4A16Linear
from exactfuse.ops.act_and_mul import gelu_and_mul, gelu_mul, silu_and_mul, silu_mul
from exactfuse.ops.gelu_and_mul_sparse import gelu_and_mul_sparse
from exactfuse.ops.gelu_and_mul_sparse.native import normal_quantile
from exactfuse.registry import get

OPS = ("silu_mul", "gelu_mul", "silu_and_mul", "gelu_and_mul", "gelu_and_mul_sparse")
_ORIGINAL = "_exactfuse_original"  # the replaced module, kept outside the module tree (no state_dict entry)


# ------------------------------------------------------------------------------------ recognition
def _activation(act: nn.Module | None) -> str | None:
    """What ``act`` computes, from its values on a probe: ``"silu"``, ``"gelu_tanh"``, ``"gelu"`` or None."""
    if not callable(act):
        return None
    probe = torch.linspace(-6.0, 6.0, 97, dtype=torch.float32)
    try:
        with torch.no_grad():
            out = act(probe)
    except Exception:
        return None
    references = {"silu": F.silu(probe), "gelu_tanh": F.gelu(probe, approximate="tanh"), "gelu": F.gelu(probe)}
    for name, ref in references.items():
        if isinstance(out, torch.Tensor) and out.shape == ref.shape and torch.equal(out, ref):
            return name
    return None


PROJECTIONS = (nn.Linear, W4A16Linear)  # the projection modules a gated MLP may hold


def _is_linear(m, in_features: int | None = None, out_features: int | None = None) -> bool:
    return (
        isinstance(m, PROJECTIONS)
        and (in_features is None or m.in_features == in_features)
        and (out_features is None or m.out_features == out_features)
    )


def _gated_mlp_parts(m: nn.Module) -> str | None:
    """Why ``m`` is not a ``down(act(gate(x)) * up(x))`` MLP, or None when it is one."""
    gate, up, down = (getattr(m, n, None) for n in ("gate_proj", "up_proj", "down_proj"))
    if not all(isinstance(p, nn.Module) for p in (gate, up, down)):
        return "no gate_proj / up_proj / down_proj"
    if not (_is_linear(gate) and _is_linear(up, gate.in_features, gate.out_features)):
        return "gate_proj and up_proj are not nn.Linear or W4A16Linear of one shape (sharded or other projections)"
    if not _is_linear(down, gate.out_features, gate.in_features):
        return "down_proj is not an nn.Linear or W4A16Linear from the intermediate size back"
    return None


def _is_experts(m: nn.Module) -> bool:
    w, d = getattr(m, "gate_up_proj", None), getattr(m, "down_proj", None)
    return isinstance(w, nn.Parameter) and isinstance(d, nn.Parameter) and w.dim() == 3 and d.dim() == 3


# ---------------------------------------------------------------------------------------- modules
class GatedMLP(nn.Module):
    """``down_proj(act_and_mul(gate_proj(x) ‖ up_proj(x)))`` over the original module's projections.

    ``activation``: ``"silu"``, ``"gelu_tanh"`` or ``"gelu"``. ``sparsity`` > 0 (Gemma3n's sparse
    layers): ``gelu_and_mul_sparse`` with the Gaussian top-k multiplier rounded to the activation dtype,
    as transformers rounds it.
    """

    def __init__(self, original: nn.Module, activation: str, sparsity: float = 0.0):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = original.gate_proj, original.up_proj, original.down_proj
        self.activation = activation
        self.sparsity = sparsity
        quantile = normal_quantile(sparsity) if sparsity > 0.0 else 0.0
        self._multipliers = {dt: float(torch.tensor(quantile, dtype=dt)) for dt in (torch.float16, torch.bfloat16)}
        self._multipliers[torch.float32] = quantile
        self._gate_up: tuple[torch.Tensor, torch.Tensor | None] | None = None

    @torch.no_grad()
    def fuse_projections(self) -> None:
        """One ``[2I, H]`` weight (and bias) for the gate and up GEMMs. The two projections' parameters stay
        the same objects with the same values and become views of it (``.data``), so ``state_dict()``, an
        optimizer's references and ``load_state_dict`` (which copies into them) all reach the fused weight;
        assigning a new parameter object to a projection afterwards is not seen (apply again)."""
        gate, up = self.gate_proj, self.up_proj
        if not self.fusable:
            raise TypeError(f"fuse_projections: gate_proj and up_proj must be nn.Linear, got {type(gate).__name__}")
        if (gate.bias is None) != (up.bias is None):
            raise ValueError("fuse_projections: gate_proj and up_proj must both have a bias or neither")
        weight = torch.cat([gate.weight, up.weight])
        gate.weight.data, up.weight.data = weight[: gate.out_features], weight[gate.out_features :]
        bias = None
        if gate.bias is not None:
            bias = torch.cat([gate.bias, up.bias])
            gate.bias.data, up.bias.data = bias[: gate.out_features], bias[gate.out_features :]
        self._gate_up = (weight, bias)

    @property
    def fused(self) -> bool:
        return self._gate_up is not None

    @property
    def fusable(self) -> bool:
        """Whether :meth:`fuse_projections` applies: both projections ``nn.Linear`` (W4A16Linear ones stay
        two GEMMs, and ``silu_mul`` / ``gelu_mul`` read both outputs)."""
        return isinstance(self.gate_proj, nn.Linear) and isinstance(self.up_proj, nn.Linear)

    @property
    def _approximate(self) -> str:
        return "tanh" if self.activation == "gelu_tanh" else "none"

    def op_name(self, fused: bool) -> str:
        """The exactfuse op this module calls: on one fused gate+up output, or on two projections."""
        if self.sparsity > 0.0:
            return "gelu_and_mul_sparse"
        return ("silu" if self.activation == "silu" else "gelu") + ("_and_mul" if fused else "_mul")

    def _joined(self, h: torch.Tensor) -> torch.Tensor:
        if self.sparsity > 0.0:
            return gelu_and_mul_sparse(h, self._multipliers[h.dtype], "tanh")
        if self.activation == "silu":
            return silu_and_mul(h)
        return gelu_and_mul(h, self._approximate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self._gate_up is not None and not (torch.is_grad_enabled() and self.gate_proj.weight.requires_grad):
            # inference: the fused weight is not a parameter, it has no grad
            return self.down_proj(self._joined(F.linear(x, *self._gate_up)))
        gate, up = self.gate_proj(x), self.up_proj(x)
        if self.sparsity > 0.0:  # the sparse op's statistics read the gate rows of one [..., 2I] tensor
            return self.down_proj(self._joined(torch.cat([gate, up], dim=-1)))
        if self.activation == "silu":
            return self.down_proj(silu_mul(gate, up))
        return self.down_proj(gelu_mul(gate, up, self._approximate))

    def extra_repr(self) -> str:
        return (f"activation={self.activation!r}" + (f", sparsity={self.sparsity}" if self.sparsity else "")
                + (", fused gate+up" if self.fused else ""))  # fmt: skip


class GatedExperts(nn.Module):
    """A transformers experts module (3-D ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``) whose
    per-expert ``act(gate) * up`` is ``silu_and_mul``; the routing loop is transformers' eager one."""

    def __init__(self, original: nn.Module):
        super().__init__()
        self.gate_up_proj, self.down_proj = original.gate_up_proj, original.down_proj
        self.num_experts = self.gate_up_proj.shape[0]

    def forward(self, hidden_states, top_k_index, top_k_weights):
        out = torch.zeros_like(hidden_states)
        with torch.no_grad():
            mask = F.one_hot(top_k_index, num_classes=self.num_experts).permute(2, 1, 0)
            hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        for e in hit:
            e = e[0]
            pos, tokens = torch.where(mask[e])
            h = silu_and_mul(F.linear(hidden_states[tokens], self.gate_up_proj[e]))
            h = F.linear(h, self.down_proj[e]) * top_k_weights[tokens, pos, None]
            out.index_add_(0, tokens, h.to(out.dtype))
        return out


# ------------------------------------------------------------------------------------- apply/revert
@dataclass
class Report:
    """What :func:`apply` replaced (module path -> what it became) and left (path -> why). A context
    manager: leaving the ``with`` block reverts the model."""

    model: nn.Module
    replaced: dict[str, str] = field(default_factory=dict)
    left: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> Report:
        return self

    def __exit__(self, *exc) -> None:
        revert(self.model)

    def __str__(self) -> str:
        lines = [f"exactfuse: replaced {len(self.replaced)} module(s), left {len(self.left)}"]
        lines += [f"  {path}: {what}" for path, what in self.replaced.items()]
        lines += [f"  left {path}: {why}" for path, why in self.left.items()]
        return "\n".join(lines)


def _candidates(model: nn.Module) -> Iterable[tuple[str, nn.Module, nn.Module, str]]:
    """(path, module, parent, attribute) of every module that looks like a gated MLP or experts."""
    for parent_path, parent in model.named_modules():
        for attr, child in parent.named_children():
            path = f"{parent_path}.{attr}" if parent_path else attr
            if hasattr(child, "gate_proj") or hasattr(child, "up_proj") or _is_experts(child):
                yield path, child, parent, attr


def _replacement(m: nn.Module, ops: set[str], exact: bool) -> tuple[nn.Module | None, str]:
    """The exactfuse module for ``m`` and what it is, or None and why not."""
    activation = _activation(getattr(m, "act_fn", None))
    if _is_experts(m):
        params = list(inspect.signature(type(m).forward).parameters)[1:]
        if activation != "silu":
            return None, f"experts activation is not SiLU ({type(getattr(m, 'act_fn', None)).__name__})"
        if params != ["hidden_states", "top_k_index", "top_k_weights"]:
            return None, f"experts forward takes {params}, not (hidden_states, top_k_index, top_k_weights)"
        backend = getattr(getattr(m, "config", None), "_experts_implementation", None) or "eager"
        if backend != "eager":
            return None, (
                f"experts backend {backend!r}: exactfuse replaces the eager per-expert loop "
                "(model.set_experts_implementation('eager') first)"
            )
        layout = {"is_transposed": False, "has_bias": False, "is_concatenated": True, "has_gate": True}
        odd = [k for k, v in layout.items() if getattr(m, k, v) != v]
        if odd:
            return None, f"experts weights not in the [gate; up] x [out, in] layout without bias ({', '.join(odd)})"
        if "silu_and_mul" not in ops:
            return None, "silu_and_mul not among the selected ops"
        return GatedExperts(m), "GatedExperts (silu_and_mul per expert)"
    why = _gated_mlp_parts(m)
    if why is not None:
        return None, why
    if activation is None:
        return None, f"activation {type(getattr(m, 'act_fn', None)).__name__} is not SiLU or GELU"
    sparsity = float(getattr(m, "activation_sparsity", 0.0) or 0.0)
    if sparsity > 0.0 and activation != "gelu_tanh":
        return None, f"activation-sparse layer with activation {activation}, not tanh-GELU"
    new = GatedMLP(m, activation, sparsity)
    op = new.op_name(fused=not exact and new.fusable)
    if op not in ops:
        return None, f"{op} not among the selected ops"
    return new, f"GatedMLP ({op})"


def _same_output(original: nn.Module, new: nn.Module) -> str | None:
    """Run both on a few rows (and, for experts, a routing), the exactfuse ops on their native specs:
    None when the bits agree, else why not. The native spec is the expression transformers evaluates,
    so this finds a forward that changed; the providers' agreement with the spec is their contract."""
    param = next(original.parameters(), None)
    if param is None or param.device.type == "meta":
        return None
    gen = torch.Generator(device="cpu").manual_seed(0)
    if isinstance(new, GatedExperts):
        E, _, H = new.gate_up_proj.shape
        x = torch.randn(8, H, generator=gen).to(param.device, param.dtype)
        k = min(2, E)
        args = (x, torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(8)]).to(param.device),
                torch.rand(8, k, generator=gen).to(param.device, param.dtype))  # fmt: skip
    else:
        x = torch.randn(4, new.gate_proj.in_features, generator=gen).to(param.device, param.dtype)
        args = (x,)
    with torch.no_grad(), contextlib.ExitStack() as natives:
        for name in OPS:
            natives.enter_context(get(name).priority(["native"]))
        want, got = original(*args), new(*args)
    if want.shape != got.shape or not torch.equal(_bits(want), _bits(got)):
        return "differs from the module's own forward on a probe (transformers changed it, or another backend)"
    return None


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().contiguous().view(torch.uint8)


def apply(model: nn.Module, *, exact: bool = True, ops: Iterable[str] | None = None) -> Report:
    """Swap ``model``'s gated MLPs and MoE experts for exactfuse modules, in place; returns the report.

    ``exact``: keep the model's numerics bit for bit (two projections); ``False``: gated MLPs also fuse
    gate and up into one GEMM (:meth:`GatedMLP.fuse_projections`; the module docstring says what that
    changes). ``ops``: the exactfuse ops that may be used (default: all of :data:`OPS`). Applying twice
    is an error; :func:`revert` first.
    """
    if not isinstance(exact, bool):
        raise TypeError(f"apply: exact must be True or False, got {exact!r}")
    selected = set(OPS if ops is None else ops)
    unknown = selected - set(OPS)
    if unknown:
        raise ValueError(f"apply: unknown op(s) {sorted(unknown)}; known: {list(OPS)}")
    report = Report(model)
    for path, module, parent, attr in list(_candidates(model)):
        if hasattr(module, _ORIGINAL):
            raise RuntimeError(f"apply: {path} is patched already; call revert(model) first")
        new, what = _replacement(module, selected, exact)
        if new is None:
            report.left[path] = what
            continue
        why = _same_output(module, new)  # before any fusion: the structure is the module's own
        if why is not None:
            report.left[path] = why
            continue
        if not exact and isinstance(new, GatedMLP):
            if new.fusable:
                new.fuse_projections()
                what += ", fused gate+up GEMM"
            else:
                what += ", W4A16 projections not fused"
        object.__setattr__(new, _ORIGINAL, module)
        new.train(module.training)
        setattr(parent, attr, new)
        report.replaced[path] = what
    return report


def revert(model: nn.Module) -> int:
    """Put back every module :func:`apply` replaced in ``model``; returns how many."""
    restored = 0
    for _, parent in list(model.named_modules()):
        for attr, child in list(parent.named_children()):
            original = getattr(child, _ORIGINAL, None)
            if original is not None:
                setattr(parent, attr, original)
                restored += 1
    return restored


__all__ = ["OPS", "GatedExperts", "GatedMLP", "Report", "apply", "revert"]
