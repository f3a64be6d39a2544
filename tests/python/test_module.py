"""The Python module against the CLI: ringmaster.plan/sweep/export return exactly what the
binary prints (--format json, export text), bad input raises ringmaster.InputError with the
CLI's message, and simulate replays a plan file. Usage: test_module.py <ringmaster binary>."""
import json
import os
import subprocess
import sys
import tempfile

import ringmaster

BIN = sys.argv[1]


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


def main():
    checked = 0
    plan = ringmaster.plan(gpus=16, seq="1M")
    assert plan == json.loads(cli("plan", "--gpus", "16", "--seq", "1M", "--format", "json").stdout), "plan differs"
    checked += 1
    assert ringmaster.plan(gpus=16, seq=1048576) == plan  # an int size is the same job
    checked += 1

    fp8 = ringmaster.plan(topology="dgx-h100-superpod", gpus=16, seq="32k", fp8="delayed")
    assert fp8 == json.loads(cli("plan", "--topology", "dgx-h100-superpod", "--gpus", "16", "--seq", "32k",
                                 "--fp8", "delayed", "--format", "json").stdout), "fp8 plan differs"
    assert fp8["fp8_recipe"] == "delayed"
    checked += 1

    # Adam's states under Megatron-Core's names, as the CLI's options take them.
    small = ringmaster.plan(topology="dgx-h100-superpod", gpus=16, seq="32k", store_param_remainders=True,
                            exp_avg_dtype="bf16", exp_avg_sq_dtype="fp8")
    assert small == json.loads(cli("plan", "--topology", "dgx-h100-superpod", "--gpus", "16", "--seq", "32k",
                                   "--store-param-remainders", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "fp8",
                                   "--format", "json").stdout), "optimizer-state plan differs"
    assert [small[k] for k in ("main_params_dtype", "store_param_remainders", "exp_avg_dtype", "exp_avg_sq_dtype")] == [
        "fp32", True, "bf16", "fp8"]
    checked += 1
    try:
        ringmaster.plan(gpus=16, seq="1M", main_params_dtype="bf16")
        raise AssertionError("a bf16 master accepted")
    except ringmaster.InputError as e:
        assert "--main-params-dtype: expected one of fp32, fp16 (got 'bf16')" in str(e), str(e)
    checked += 1

    sweep = ringmaster.sweep(gpus=[16, 32], seqs=["128k", "1M"])
    assert len(sweep["plans"]) == 4 and sweep["plans"][1] == plan, "sweep rows (GPU counts outer)"
    checked += 1

    try:
        ringmaster.plan(gpus=16, seq="1.3M")
        raise AssertionError("--seq 1.3M accepted")
    except ringmaster.InputError as e:
        err = cli("plan", "--gpus", "16", "--seq", "1.3M")
        assert err.returncode == 2 and str(e).replace("ringmaster.plan", "command line") in err.stderr, (str(e), err.stderr)
        assert isinstance(e, ValueError)
    checked += 1

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "plan.yaml")
        titan = ringmaster.plan(gpus=16, seq="1M", target="torchtitan", output=path)
        # The target prices the framework's gradient reduction (torchtitan: fp32), as the CLI does.
        assert titan == json.loads(cli("plan", "--gpus", "16", "--seq", "1M", "--target", "torchtitan",
                                       "--format", "json").stdout), "plan(target=) differs from the CLI"
        assert titan["grad_reduce_in_fp32"] is True
        checked += 1
        for to in ("megatron", "torchtitan"):
            assert ringmaster.export(plan=path, to=to) == cli("export", "--plan", path, "--to", to).stdout, to
            checked += 1
        try:
            ringmaster.export(plan=path, to="slurm-ish")
            raise AssertionError("bad target accepted")
        except ringmaster.InputError as e:
            assert "expected one of megatron, torchtitan, slurm" in str(e)
        checked += 1
        # slurm: the script launches `ringmaster run`, which executes p2p and all_gather CP on GPUs
        # (a2a on the cpu backend only); an a2a plan for GPUs is refused with the CLI's message (both
        # exit-2 paths name plan.strategy).
        a2a = os.path.join(d, "a2a.yaml")
        assert ringmaster.plan(gpus=16, seq="512k", output=a2a)["plan"]["cp_comm_type"] == "a2a"
        try:
            ringmaster.export(plan=a2a, to="slurm")
            raise AssertionError("an a2a plan exported to slurm")
        except ringmaster.InputError as e:
            err = cli("export", "--plan", a2a, "--to", "slurm")
            assert err.returncode == 2 and "plan.strategy: the cuda backend runs context parallelism of cp_comm_type p2p" in str(e), str(e)
            assert str(e) in err.stderr, (str(e), err.stderr)
        checked += 1
        # target="slurm" searches only what `ringmaster run` executes: that plan exports.
        ours = os.path.join(d, "ours.yaml")
        picked = ringmaster.plan(gpus=16, seq="512k", target="slurm", output=ours)["plan"]
        assert picked["cp_comm_type"] in ("p2p", "all_gather") and picked["tp"] == 1, picked
        assert ringmaster.export(plan=ours, to="slurm") == cli("export", "--plan", ours, "--to", "slurm").stdout
        checked += 1
        sim = ringmaster.simulate(plan=path, layers=2)
        assert sim["simulated"]["step_time_s"] > 0 and sim["gpus"] == 16
        checked += 1
    print(f"python module: {checked} checks passed")


if __name__ == "__main__":
    main()
