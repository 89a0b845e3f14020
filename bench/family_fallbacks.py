"""Which operators each model family runs on the CPU's kernels on the native path.

For every family of tests/torch/test_model_families.py (small random configurations, nothing
downloaded), this builds the model with its dropout as configured, moves it to opencl:0, and trains
it with AdamW (foreach) on the native path (OCLVM_KERNELS=native): one step to warm up, then one
step counted. It prints, per family, the operator calls that ran native kernels, the calls that
fell back to a CPU kernel (torch.opencl.fallback_counts()), the share of native calls, the counted
step's time, and the most frequent fallbacks.

    .venv/bin/python bench/family_fallbacks.py [--families gpt2 mixtral_moe ...] [--top 6]
"""
import argparse
import os
import pathlib
import sys
import time
import warnings

os.environ.setdefault("OCLVM_KERNELS", "native")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests" / "torch"))

import torch  # noqa: E402

import oclvm  # noqa: E402,F401  (the opencl device)


def count_step(family, model, optimizer, batch):
    """One training step; returns (native operator calls, {operator: fallback calls}, seconds)."""
    torch.opencl.synchronize()
    calls = oclvm._C.native_operator_calls()
    torch.opencl.reset_fallback_counts()
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    family.loss(model, batch).backward()
    optimizer.step()
    torch.opencl.synchronize()
    seconds = time.perf_counter() - start
    return oclvm._C.native_operator_calls() - calls, torch.opencl.fallback_counts(), seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="*", help="names to run (default: every family)")
    parser.add_argument("--top", type=int, default=6, help="fallbacks listed per family")
    args = parser.parse_args()
    import test_model_families  # the families' definitions (imports transformers and diffusers)
    test_model_families.NOISE_ON_CPU = False  # a user's loop draws its noise on the device
    from model_families_util import move_to_device, to_device

    families = [f for f in test_model_families.FAMILIES
                if not args.families or f.name in args.families]
    unknown = set(args.families or []) - {f.name for f in families}
    if unknown:
        print(f"unknown families: {', '.join(sorted(unknown))}; known: "
              f"{', '.join(f.name for f in test_model_families.FAMILIES)}", file=sys.stderr)
        return 2
    if not torch.opencl.get_device_properties(0).native_kernels:
        print("opencl:0 does not take the native path (OCLVM_KERNELS=host?)", file=sys.stderr)
        return 2
    warnings.simplefilter("ignore")  # the first-fallback warnings: counted below instead
    print(f"oclvm model families on the native path (torch {torch.__version__}, "
          f"{torch.opencl.get_device_name(0)}): one AdamW training step each")
    print(f"{'family':<24} {'native':>7} {'CPU':>5} {'share':>7} {'ms':>7}  most frequent fallbacks")
    for family in families:
        model = move_to_device(family.build(keep_dropout=True))  # a user's model, dropout on
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        batches = [to_device(b, "opencl") for b in family.batches(2)]
        torch.manual_seed(0)
        count_step(family, model, optimizer, batches[0])  # kernels built, state made
        native, fallbacks, seconds = count_step(family, model, optimizer, batches[1])
        fell_back = sum(fallbacks.values())
        share = native / max(1, native + fell_back)
        top = sorted(fallbacks.items(), key=lambda kv: -kv[1])[:args.top]
        listed = ", ".join(f"{name.removeprefix('aten::')} {n}" for name, n in top) or "none"
        print(f"{family.name:<24} {native:>7} {fell_back:>5} {share:>7.1%} {seconds * 1e3:>7.1f}  "
              f"{listed}", flush=True)
        del model, optimizer, batches
    return 0


if __name__ == "__main__":
    sys.exit(main())
