"""Echo's all-reduce inside a Hugging Face transformers model loaded with tensor parallelism.

    model = AutoModelForCausalLM.from_pretrained(path, tp_plan="auto")   # torch.distributed is up
    with echo_allreduce.hf.patched(model) as echo:    # collective: every rank of the TP group
        ids = model.generate(...)                      # (or: echo = patch(model); ...; unpatch(model))

transformers ends every row-parallel Linear of its plan (attention's ``o_proj`` and the MLP's
``down_proj``: the "rowwise" styles) with ``torch.distributed.all_reduce`` of the layer's partial
output when it runs without autograd. :func:`patch` gives those layers a forward that makes the
same partial product (transformers' own input handling and local weights) and then calls Echo:

- one chain per forward pass, started afresh by a hook on the innermost module that holds every
  site (a decoder's stack of layers, so a wrapper that calls it directly starts a pass too);
- the sites in the order ``named_modules()`` lists them (a decoder's layers in forward order), the
  last one closing the chain (``closes``; checked at run time: a pass that calls them out of order
  turns closing off for later passes, with a warning; the pass that shows it may have closed early);
- the layer's own forward (transformers' all-reduce) wherever Echo cannot serve: with autograd, for
  DTensor inputs, and for tensors :meth:`EchoAllReduce.fits` refuses (dtype, size); a counter says
  how often (``EchoPatch.fallbacks``).

Error feedback is sound only where each site's output is added, unscaled, to the residual stream
(pre-norm blocks). A model that normalizes a block's output before the residual add (a
``post_feedforward_layernorm`` or ``post_norm<i>``: Gemma 2-4, OLMo 2-3, EXAONE 4, HyperCLOVA X)
runs without compensation, with a warning; ``compensate=True`` insists, ``compensate=False`` turns
it off anywhere. A site whose output a gate scales (a shared expert beside a
``shared_expert_gate``) keeps out of the chain on its own.
"""

from __future__ import annotations

import re
import warnings
from typing import Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from .front import EchoAllReduce

__all__ = ["EchoPatch", "patch", "unpatch", "patched", "row_parallel_sites", "post_block_norms"]

# transformers' styles that end in an all-reduce of a Linear's partial output
_ROW_STYLES = ("rowwise", "rowwise_rep", "rowwise_split_input")
# a module of these names normalizes a block's output before the residual add
_POST_BLOCK_NORM = re.compile(r"(^|\.)post_((feedforward|mlp)_(layer)?norm|norm\d+)$")
# a gate that scales a shared expert's output before it joins the residual stream
_GATE = "shared_expert_gate"


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def row_parallel_sites(model: nn.Module) -> list:
    """(name, module, style) of every Linear whose TP style ends in an all-reduce, in
    ``named_modules()`` order."""
    from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, _get_parameter_tp_plan

    plan = getattr(model, "tp_plan", None) or {}
    sites = []
    for name, module in model.named_modules():
        style = _get_parameter_tp_plan(parameter_name=name, tp_plan=plan, is_weight=False) if plan else None
        if style in _ROW_STYLES and isinstance(module, nn.Linear):
            sites.append((name, module, ALL_PARALLEL_STYLES[style]))
    return sites


def post_block_norms(model: nn.Module) -> list:
    """Names of the modules that normalize a block's output before the residual add."""
    return [name for name, _ in model.named_modules() if _POST_BLOCK_NORM.search(name)]


def _gated(model: nn.Module, name: str) -> bool:
    """Whether the site `name` is a shared expert's, beside a gate that scales its output."""
    parts = name.split(".")
    for k in range(len(parts) - 1, 0, -1):
        holder = model.get_submodule(".".join(parts[:k]))
        if hasattr(holder, _GATE) and parts[k].startswith("shared_expert") and parts[k] != _GATE:
            return True
    return False


def _pass_root(model: nn.Module, names: list) -> nn.Module:
    """The innermost module whose forward runs every site: their common prefix, less the lists
    (a ModuleList is never called itself)."""
    common = []
    for parts in zip(*(n.split(".")[:-1] for n in names)):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    while common and isinstance(model.get_submodule(".".join(common)), (nn.ModuleList, nn.ModuleDict)):
        common.pop()
    return model.get_submodule(".".join(common)) if common else model


def _mesh_of(module: nn.Module):
    weight = module.weight
    mesh = getattr(weight, "device_mesh", None)
    if mesh is None:
        raise ValueError(f"echo_allreduce.hf: {type(module).__name__}'s weight is not a DTensor: was the model "
                         "loaded with tp_plan?")
    return mesh


class EchoPatch:
    """What :func:`patch` installed: the communicator, the chain, the sites; :meth:`remove` undoes it."""

    def __init__(self, model: nn.Module, comm: EchoAllReduce, owns_comm: bool, compensated: bool, close: bool,
                 message_dtype: Optional[torch.dtype]):
        self.model = model
        self.comm = comm
        self.compensated = compensated
        self.close = close
        self.message_dtype = message_dtype
        self.chain = comm.new_chain() if compensated and comm.keeps_state else None
        # a compensating comm where a site must not chain: every such call on a chain started
        # afresh (made by _install only where some site needs it: a chain's state is max_elements big)
        self.unchained = None
        self.sites: list = []  # names, in the order the chain expects them
        self.unchained_sites: list = []  # names of the sites kept out of the chain (a gated output)
        self.fallbacks = 0  # calls that went to transformers' own all-reduce
        self._owns_comm = owns_comm
        self._originals: list = []  # (module, the forward patch() replaced)
        self._hook = None
        self._previous = -1  # index of the pass's last site called so far (eager)

    # ---- the pass boundary ------------------------------------------------------------------------
    def _new_pass(self, module, args):
        if self.chain is not None:
            self.comm.reset_chain(self.chain)
        self._previous = -1

    # ---- one site ---------------------------------------------------------------------------------
    def _site_forward(self, index: int, module: nn.Linear, style, mesh, original, chained: bool):
        last = index == len(self.sites) - 1
        on_chain = chained and self.chain is not None  # the pass's chain: closed at the last site
        group = mesh.get_group() if mesh.ndim == 1 else mesh.get_group("tp")

        def forward(*args, **kwargs):
            if torch.is_grad_enabled() or isinstance(args[0], DTensor) or not style.should_use_local_tensors(module):
                self.fallbacks += 1
                return original(*args, **kwargs)
            args, kwargs = style.transform_inputs_pre_forward(module, args, kwargs, mesh)
            with style.context_around_forward(module, mesh):  # local weights, the bias held back
                y = type(module).forward(module, *args, **kwargs)  # the layer's own (a quantized one too)
            message = (y if self.message_dtype is None else y.to(self.message_dtype)).contiguous()
            chain = self.chain if on_chain else self.unchained
            if not on_chain and chain is not None:
                self.comm.reset_chain(chain)
            # fits() judges what every rank shares (dtype, size), so all ranks take the same path
            if self.comm.fits(message, chain):
                if not _compiling() and message.data_ptr() % 16:
                    message = message.clone()  # Echo needs 16-byte alignment
                closes = on_chain and self.close and last
                if on_chain and not _compiling():
                    if index <= self._previous and self.close:
                        self.close = False
                        warnings.warn("echo_allreduce.hf: the row-parallel layers ran out of named_modules() order; "
                                      "the chain's closing call is off", RuntimeWarning, stacklevel=2)
                    self._previous = index
                self.comm.all_reduce(message, chain=chain, closes=closes)
            else:
                self.fallbacks += 1
                dist.all_reduce(message, group=group)
            y = message if self.message_dtype is None else message.to(y.dtype)
            bias = module._parameters.get("bias")
            if bias is not None:
                y = y + (bias.to_local() if isinstance(bias, DTensor) else bias)
            return y

        return forward

    def _install(self) -> None:
        sites = row_parallel_sites(self.model)
        meshes = [_mesh_of(module) for _, module, _ in sites]  # every check before any change
        self.sites = [name for name, _, _ in sites]
        self.unchained_sites = [name for name in self.sites if _gated(self.model, name)]
        if self.comm.keeps_state and (self.chain is None or self.unchained_sites):
            self.unchained = self.comm.new_chain()
        root = _pass_root(self.model, self.sites)
        for index, ((name, module, style), mesh) in enumerate(zip(sites, meshes)):
            original = module.forward
            module.forward = self._site_forward(index, module, style, mesh, original,
                                                name not in self.unchained_sites)
            self._originals.append((module, original))
        self._hook = root.register_forward_pre_hook(self._new_pass)

    def remove(self, close_comm: bool = True) -> None:
        """Give every site its forward back and drop the hook; close a communicator patch() made
        (close_comm=False leaves it open: closing is collective, and after an error on one rank
        its peers would not come)."""
        for module, original in self._originals:
            module.forward = original
        self._originals = []
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if getattr(self.model, "_echo_patch", None) is self:
            del self.model._echo_patch
        if self._owns_comm and close_comm:
            self.comm.close()

    def __repr__(self):
        return (f"EchoPatch({len(self.sites)} sites, compensated={self.compensated}, close={self.close}, "
                f"fallbacks={self.fallbacks}, {self.comm!r})")


def patch(model: nn.Module, comm: Optional[EchoAllReduce] = None, *, max_tokens: int = 16384,
          compensate: Optional[bool] = None, close: bool = True, message_dtype: Optional[torch.dtype] = None,
          **echo_kwargs) -> EchoPatch:
    """Route the row-parallel all-reduces of ``model`` (loaded with ``tp_plan``) through Echo.

    Collective: every rank of the model's TP group calls it. ``comm``: an :class:`EchoAllReduce`
    over that group; without one, patch() makes one (``echo_kwargs``: its arguments; the
    recommended 4-bit setting unless they say otherwise) for messages up to ``max_tokens`` x
    hidden size values, and closes it in :func:`unpatch`. ``compensate``: None (error feedback
    unless the model normalizes block outputs, see the module's docstring), True or False.
    ``close``: the pass's last site closes the chain. ``message_dtype``: the dtype the partial
    outputs travel in (e.g. ``torch.bfloat16`` for an fp32 model, as a bf16 deployment sends
    them); None: the layer's own.
    """
    if getattr(model, "_echo_patch", None) is not None:
        raise ValueError("echo_allreduce.hf.patch: the model is patched already (unpatch it first)")
    sites = row_parallel_sites(model)
    if not sites:
        raise ValueError("echo_allreduce.hf.patch: the model has no row-parallel layers: load it with "
                         "from_pretrained(..., tp_plan='auto') under torch.distributed")
    mesh = _mesh_of(sites[0][1])
    group = mesh.get_group() if mesh.ndim == 1 else mesh.get_group("tp")
    norms = post_block_norms(model)
    compensated = not norms if compensate is None else bool(compensate)
    if compensate is None and norms:
        warnings.warn(f"echo_allreduce.hf: {type(model).__name__} normalizes block outputs before the residual add "
                      f"({norms[0]}, ...): error feedback would not cancel its errors there; running without "
                      "compensation (compensate=True insists)", RuntimeWarning, stacklevel=2)
    owns = comm is None
    if owns:
        hidden = model.config.get_text_config().hidden_size
        kwargs = dict(echo_kwargs)
        if not compensated:
            kwargs.setdefault("comp", "none")
        comm = EchoAllReduce(group, max_tokens * hidden, **kwargs)
    elif dist.get_process_group_ranks(comm.group) != dist.get_process_group_ranks(group):
        raise ValueError("echo_allreduce.hf.patch: comm is not over the model's tensor-parallel group")
    p = EchoPatch(model, comm, owns, compensated, close, message_dtype)
    p._install()
    model._echo_patch = p
    return p


def blocks_only_plan(path: str, **config_kwargs) -> dict:
    """transformers' own tensor-parallel plan for the model at ``path``, its decoder blocks only:
    the embedding and the head stay whole on every rank. Pass it as ``from_pretrained(...,
    tp_plan=blocks_only_plan(path))`` where ranks share one GPU and so run over gloo (NCCL refuses
    two ranks on one device): torch 2.11's gloo crashes (SIGSEGV) in the all-gather of CUDA tensors
    that the head's ``colwise_gather_output`` makes. The blocks' split, and so every all-reduce
    Echo serves, is the one ``tp_plan="auto"`` gives. ``config_kwargs`` go to
    ``AutoConfig.from_pretrained`` (e.g. ``gguf_file=``)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        plan = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path, **config_kwargs)).tp_plan
    blocks = {k: v for k, v in (plan or {}).items() if ".layers.*." in k}
    if not blocks or any(v not in ("colwise", "rowwise") for v in blocks.values()):
        raise ValueError(f"echo_allreduce.hf.blocks_only_plan: the model's blocks have no plain colwise / rowwise "
                         f"split to keep: {blocks}")
    return blocks


def unpatch(model: nn.Module, close_comm: bool = True) -> None:
    """Undo :func:`patch` (a model that is not patched is left as it is); see EchoPatch.remove."""
    p = getattr(model, "_echo_patch", None)
    if p is not None:
        p.remove(close_comm)


class patched:
    """``with patched(model, ...) as echo:``: :func:`patch` on entry, :func:`unpatch` on exit."""

    def __init__(self, model: nn.Module, comm: Optional[EchoAllReduce] = None, **kwargs):
        self.model, self.comm, self.kwargs = model, comm, kwargs
        self.patch: Optional[EchoPatch] = None

    def __enter__(self) -> EchoPatch:
        self.patch = patch(self.model, self.comm, **self.kwargs)
        return self.patch

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.patch is not None and self.patch._owns_comm:
            warnings.warn("echo_allreduce.hf.patched: left on an exception; its communicator stays open (closing is "
                          "collective): close it with echo.comm.close() on every rank", RuntimeWarning, stacklevel=2)
        unpatch(self.model, close_comm=exc_type is None)
        return False
