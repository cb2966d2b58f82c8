"""echo_allreduce.hf on CPU: a tiny random Llama (and OLMo 2) built from transformers' config
classes, loaded with tp_plan="auto" on 2 gloo ranks, its row-parallel all-reduces through the
front's reference backend. The oracle is the unpatched model with torch.distributed.all_reduce
swapped for echo_allreduce.reference on the gathered partial outputs, along one chain a forward
pass, the last call closing it: so the patch must find every site, in order, reset the chain at
each pass and close it at the last site."""

import os
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("accelerate", reason="accelerate is not installed (transformers' tp_plan needs it)")
import torch.distributed as dist  # noqa: E402

from _ranks import from_numpy, run_ranks, same_bits, to_numpy  # noqa: E402
from echo_allreduce import reference  # noqa: E402
from echo_allreduce.front import RECOMMENDED_CLIP  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is unavailable", allow_module_level=True)

P = 2
TOKENS = 16  # a pass: 1 x 16 tokens x hidden 128 = 2048 values a message


def _save(tmp, kind):
    from transformers import LlamaConfig, LlamaForCausalLM, Olmo2Config, Olmo2ForCausalLM

    torch.manual_seed(0)
    common = dict(vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64)
    # the Llama with biases: the patch adds a row-parallel layer's bias once, after the sum
    model = (LlamaForCausalLM(LlamaConfig(**common, attention_bias=True, mlp_bias=True)) if kind == "llama"
             else Olmo2ForCausalLM(Olmo2Config(**common)))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0, 0.5)  # transformers initialises them to zero
    path = os.path.join(tmp, kind)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hf")
    return {kind: _save(str(tmp), kind) for kind in ("llama", "olmo2")}


def _load(path):
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    # transformers reads the ranks from the environment, as torchrun sets it
    os.environ.update(RANK=str(dist.get_rank()), WORLD_SIZE=str(dist.get_world_size()), LOCAL_RANK="0")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return AutoModelForCausalLM.from_pretrained(path, tp_plan="auto", device_mesh=mesh, dtype=torch.float32)


def _ids(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 96, (1, TOKENS), generator=g)


class _Oracle:
    """torch.distributed.all_reduce as the reference computes Echo's call: every rank's partial
    output (in message_dtype) gathered, summed by echo_allreduce.reference along a chain of the
    given setting."""

    def __init__(self, world, rank, calls_per_pass, message_dtype=torch.float32, **setting):
        self.world, self.rank, self.calls = world, rank, calls_per_pass
        self.message_dtype = message_dtype
        self.setting = setting
        self.chain = reference.ChainState(world, 1 << 16, "int8") if setting.get("comp") == "error_feedback" else None
        self.k = 0
        self._real = dist.all_reduce

    def new_pass(self):
        self.k = 0
        if self.chain is not None:
            self.chain.reset()

    def __call__(self, t, op=dist.ReduceOp.SUM, group=None, async_op=False):
        m = t.to(self.message_dtype)
        parts = [torch.empty_like(m) for _ in range(self.world)]
        dist.all_gather(parts, m.contiguous(), group=group)
        closes = self.chain is not None and self.k == self.calls - 1
        dtype = {torch.float32: "f32", torch.bfloat16: "bf16"}[self.message_dtype]
        out = reference.all_reduce([to_numpy(p) for p in parts], chain=self.chain, dtype=dtype, closes=closes,
                                   **self.setting)[self.rank]
        t.copy_(from_numpy(out, m.dtype, m))
        self.k += 1

    def run(self, fn):
        """fn() (a forward pass) with this oracle as torch.distributed.all_reduce."""
        self.new_pass()
        dist.all_reduce = self
        try:
            with torch.no_grad():
                return fn()
        finally:
            dist.all_reduce = self._real

    def logits(self, model, ids):
        return self.run(lambda: model(ids).logits)


DEFAULT = dict(rotate=True, clip=RECOMMENDED_CLIP, comp="error_feedback", storage="int8")


def _default_and_exact(rank, world, path):
    from echo_allreduce import EchoAllReduce, hf

    model = _load(path)
    sites = [name for name, _, _ in hf.row_parallel_sites(model)]
    assert sites == [f"model.layers.{i}.{s}" for i in range(3) for s in ("self_attn.o_proj", "mlp.down_proj")]
    with torch.no_grad():
        plain = [model(_ids(s)).logits for s in range(2)]
    oracle = _Oracle(world, rank, len(sites), **DEFAULT)
    want = [oracle.logits(model, _ids(s)) for s in range(2)]  # a second pass: the chain starts afresh
    assert not same_bits(want[0], plain[0])  # the 4-bit sum is not the exact one

    comm = EchoAllReduce(None, 1 << 16, backend="reference", unquantized_below_bytes=0)
    assert (comm.rotate, comm.clip, comm.storage) == (True, 870, "int8")
    with hf.patched(model, comm) as p:
        assert p.sites == sites and p.compensated and p.close
        with torch.no_grad():
            got = [model(_ids(s)).logits for s in range(2)]
        assert p.fallbacks == 0
    for g, w in zip(got, want):
        assert same_bits(g, w)
    # without the closing call, only the hook's reset keeps one pass's errors out of the next
    open_oracle = _Oracle(world, rank, 1 << 30, **DEFAULT)  # never the pass's last call
    want = [open_oracle.logits(model, _ids(s)) for s in range(2)]
    with hf.patched(model, comm, close=False):
        with torch.no_grad():
            for s in range(2):
                assert same_bits(model(_ids(s)).logits, want[s]), s
    # unpatched: transformers' own all-reduce again
    with torch.no_grad():
        assert same_bits(model(_ids(0)).logits, plain[0])
    assert getattr(model, "_echo_patch", None) is None

    # Echo's exact path through the patch: the sum transformers makes (two terms: the same bits)
    exact = EchoAllReduce(None, 1 << 16, backend="reference", quant="none", comp="none")
    with hf.patched(model, exact) as p:
        with torch.no_grad():
            assert same_bits(model(_ids(0)).logits, plain[0])
        assert p.fallbacks == 0
    exact.close()

    # bf16 messages from an fp32 model
    bf16 = _Oracle(world, rank, len(sites), message_dtype=torch.bfloat16, **DEFAULT)
    want = bf16.logits(model, _ids(2))
    with hf.patched(model, comm, message_dtype=torch.bfloat16):
        with torch.no_grad():
            assert same_bits(model(_ids(2)).logits, want)

    # a pass started by calling the decoder directly (as a wrapper might): the hook sits there
    inner = _Oracle(world, rank, 1 << 30, **DEFAULT)
    want = [inner.run(lambda: model.model(_ids(s)).last_hidden_state) for s in range(2)]
    with hf.patched(model, comm, close=False):
        with torch.no_grad():
            for s in range(2):
                assert same_bits(model.model(_ids(s)).last_hidden_state, want[s]), s

    # messages Echo does not take (more than max_elements): transformers' own sum, every rank alike
    small = EchoAllReduce(None, 1000, backend="reference", unquantized_below_bytes=0)
    with hf.patched(model, small) as p:
        with torch.no_grad():
            assert same_bits(model(_ids(0)).logits, plain[0])
        assert p.fallbacks == len(sites)
    small.close()

    # with autograd on, the sites keep transformers' own path (a DTensor all-reduce with a backward)
    p = hf.patch(model, comm)
    ids = _ids(0)
    out = model(ids).logits
    assert p.fallbacks == len(sites)
    out.sum().backward()
    hf.unpatch(model)
    comm.close()


def test_the_patch_equals_the_reference_along_each_pass(models):
    run_ranks(_default_and_exact, world=P, args=(models["llama"],))


def _misuse(rank, world, llama, olmo2):
    from echo_allreduce import EchoAllReduce, hf
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(llama, dtype=torch.float32)  # no tp_plan
    with pytest.raises(ValueError, match="tp_plan"):
        hf.patch(plain)

    model = _load(llama)
    p = hf.patch(model, backend="reference", unquantized_below_bytes=0)  # a comm of its own: closed by unpatch
    with pytest.raises(ValueError, match="patched already"):
        hf.patch(model)
    hf.unpatch(model)
    hf.unpatch(model)  # twice: nothing to undo

    # OLMo 2 normalizes its blocks' outputs before the residual add: no error feedback
    olmo = _load(olmo2)
    assert hf.post_block_norms(olmo) and not hf.post_block_norms(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        p = hf.patch(olmo, backend="reference", unquantized_below_bytes=0)
    assert any("without compensation" in str(w.message) for w in caught)
    assert not p.compensated and p.chain is None and p.comm.comp == "none"
    sites = len(p.sites)
    hf.unpatch(olmo)
    oracle = _Oracle(world, rank, sites, rotate=True, clip=RECOMMENDED_CLIP, comp="none")
    want = oracle.logits(olmo, _ids(3))
    with hf.patched(olmo, backend="reference", unquantized_below_bytes=0, compensate=False) as p:
        with torch.no_grad():
            assert same_bits(olmo(_ids(3)).logits, want)
    # ... and a compensating comm passed in: its calls keep out of any chain (a fresh one each)
    comm = EchoAllReduce(None, 1 << 16, backend="reference", unquantized_below_bytes=0)
    with hf.patched(olmo, comm) as p:
        assert p.chain is None and p.unchained is not None
        with torch.no_grad():
            got = olmo(_ids(3)).logits
    fresh = _Oracle(world, rank, sites, **DEFAULT)
    fresh.new_pass = lambda: None
    # the oracle with a chain reset before every call: error feedback that reaches nothing
    real_call = fresh.__call__

    def every_call_fresh(t, **kw):
        fresh.chain.reset()
        fresh.k = 0  # never the closing call
        return real_call(t, **kw)

    dist.all_reduce = every_call_fresh
    try:
        with torch.no_grad():
            want = olmo(_ids(3)).logits
    finally:
        dist.all_reduce = fresh._real
    assert same_bits(got, want)
    comm.close()


def test_misuse_and_post_block_norms(models):
    run_ranks(_misuse, world=P, args=(models["llama"], models["olmo2"]))


def test_blocks_only_plan_keeps_the_blocks_split_of_auto(models):
    """blocks_only_plan is transformers' own plan less what lies outside the decoder blocks: the same
    row- and column-parallel split of every block (so the same all-reduces), the head left whole."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from echo_allreduce import hf

    path = models["llama"]
    with torch.device("meta"):
        auto = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path)).tp_plan
    plan = hf.blocks_only_plan(path)
    assert plan == {k: v for k, v in auto.items() if ".layers.*." in k}
    assert any(v == "rowwise" for v in plan.values()) and any(v == "colwise" for v in plan.values())
    assert len(plan) < len(auto)
    # OLMo 2's blocks gather q / k for their norms (colwise_gather_output): the crash it avoids is in them
    with pytest.raises(ValueError, match="no plain colwise / rowwise split"):
        hf.blocks_only_plan(models["olmo2"])
