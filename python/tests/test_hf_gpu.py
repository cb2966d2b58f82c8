"""echo_allreduce.hf on the GPU: a tiny random Llama loaded with tp_plan="auto" at TP = 2, its
row-parallel all-reduces through Echo's torch ops, bit for bit equal to the same model patched
with the front's reference backend, along two passes and a greedy generation (every call
quantized, the decode steps' small ones too). It checks the ops under the patch; what the patch
does is test_hf_cpu.py's. Ranks: as in test_gpu.py (two GPUs over NCCL, or one shared by both
ranks over gloo with ECHO_TEST_RANKS=2)."""

import os

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the GPU tests need it")
pytest.importorskip("transformers", reason="transformers is not installed")
pytest.importorskip("accelerate", reason="accelerate is not installed (transformers' tp_plan needs it)")
from echo_allreduce import ops  # noqa: E402

if not ops.ops_available():
    pytest.skip("echo_allreduce was built without its torch ops (ECHO_BUILD_TORCH=OFF)", allow_module_level=True)
GPUS = torch.cuda.device_count()
SHARED = GPUS < 2
if GPUS == 0 or (SHARED and os.environ.get("ECHO_TEST_RANKS") != "2"):
    pytest.skip(f"needs 2 GPUs (or 1 with ECHO_TEST_RANKS=2), found {GPUS}", allow_module_level=True)
BACKEND = "gloo" if SHARED else "nccl"

import torch.distributed as dist  # noqa: E402

from _ranks import run_ranks, same_bits  # noqa: E402


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, eos_token_id=None, bos_token_id=None)
    path = str(tmp_path_factory.mktemp("hf") / "llama")
    LlamaForCausalLM(cfg).save_pretrained(path)
    return path


def _body(rank, world, path):
    from echo_allreduce import EchoAllReduce, hf
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    local = rank % GPUS
    torch.cuda.set_device(local)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
    mesh = init_device_mesh("cuda", (world,))
    # gloo (ranks sharing a GPU) crashes gathering CUDA tensors (the head's output): the blocks only
    plan = hf.blocks_only_plan(path) if SHARED else "auto"
    model = AutoModelForCausalLM.from_pretrained(path, tp_plan=plan, device_mesh=mesh, dtype=torch.bfloat16)
    g = torch.Generator().manual_seed(1)
    ids = [torch.randint(0, 96, (2, 48), generator=g).cuda() for _ in range(2)]

    def run(comm):
        with hf.patched(model, comm) as p:
            with torch.no_grad():
                logits = [model(i).logits for i in ids]
                text = model.generate(ids[0][:1, :8], max_new_tokens=6, do_sample=False)
            assert p.fallbacks == 0, p
        return logits, text

    kw = dict(unquantized_below_bytes=0)
    echo = EchoAllReduce(None, 1 << 16, backend="cuda", device=torch.device("cuda", local), **kw)
    ref = EchoAllReduce(None, 1 << 16, backend="reference", **kw)
    got, got_text = run(echo)
    want, want_text = run(ref)
    for a, b in zip(got, want):
        assert same_bits(a, b)
    assert torch.equal(got_text, want_text)
    echo.close()
    ref.close()


def test_a_patched_transformers_model_equals_the_reference(llama):
    run_ranks(_body, backend=BACKEND, args=(llama,), timeout=600)
