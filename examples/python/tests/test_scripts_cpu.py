"""The example programs that the GPU checks run (train_tp, e2e_tp, beside_gemm, fused_block) end to end in their
CPU modes (2 gloo ranks, tiny shapes, the `sim` backend for Echo): they start, run every stage and
write their JSON, so a GPU run is not spent finding a broken script. Needs torch; the
training check needs the corpus (.data/corpus, scripts/data/build_corpus.py) and skips without it."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(HERE))


def run(script, *args, timeout=600):
    p = subprocess.run([sys.executable, os.path.join(HERE, script), *args], capture_output=True, text=True,
                       timeout=timeout, cwd=ROOT)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-4000:]
    return p.stdout


def test_e2e_cpu(tmp_path):
    out = tmp_path / "e2e.json"
    run("e2e_tp.py", "--cpu", "--tiny", "--backends", "nccl,sim:za4g128+ef", "--loads", "0", "--reps", "2",
        "--decode-reps", "2", "--out", str(out))
    d = json.load(open(out))
    assert {"prefill", "decode", "train"} <= {r["workload"] for r in d["results"]}
    assert all(set(r["times"]) == {"noop", "nccl", "sim:za4g128+ef"} for r in d["results"])


def test_beside_gemm_cpu(tmp_path):
    out = tmp_path / "beside.json"
    run("beside_gemm.py", "--cpu", "--size-mib", "1", "--gemm", "128", "--reps", "2", "--warmup", "1",
        "--backends", "nccl,sim:za4g128+ef", "--out", str(out))
    d = json.load(open(out))
    for spec in ("nccl", "sim:za4g128+ef"):
        assert d["backends"][spec]["ar_alone"] > 0 and d["backends"][spec]["gemm_alone"] > 0


@pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".data", "corpus", "train.u16.npy")),
                    reason="no corpus in .data/corpus (python3 scripts/data/build_corpus.py)")
def test_train_cpu(tmp_path):
    out = tmp_path / "training.json"
    run("train_tp.py", "--cpu", "--tiny", "--steps", "3", "--variants", "nccl,sim:za4g128+ef", "--noop-steps", "0",
        "--eval-every", "0", "--out", str(out))
    d = json.load(open(out))
    assert set(d["variants"]) == {"nccl", "sim:za4g128+ef"}
    # sequence parallelism: the exact pair gives the loss the all-reduce gave (to rounding)
    sp = tmp_path / "training-sp.json"
    run("train_tp.py", "--cpu", "--tiny", "--steps", "3", "--variants", "nccl", "--noop-steps", "0",
        "--eval-every", "0", "--sequence-parallel", "--out", str(sp))
    got = json.load(open(sp))["variants"]["nccl"]["final_val"]
    assert abs(got - d["variants"]["nccl"]["final_val"]) <= 1e-3 * abs(got), got


def test_fused_block_cpu():
    pytest.importorskip("echo_allreduce.reference")  # the reference backend's compiled part
    out = run("fused_block.py", "--cpu", "--hidden", "256", "--heads", "4", "--ffn", "512", "--layers", "2",
              "--tokens", "1,8,40")
    lines = [l for l in out.splitlines() if l.startswith("tokens")]
    assert len(lines) == 3, out
