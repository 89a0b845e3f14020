"""Records the allocation traces shipped in traces/ with torch.opencl.memory.record_trace, from
the project's own example models (the training steps bench/torch_bench.py times):

    traces/mlp_sgd.trace          MLP 32-64-4, SGD with momentum, batch 64: model creation, 20 steps
    traces/gpt2_adamw.trace       GPT-2 4 layers x 128 (transformers, random init), AdamW, batch
                                  8 x 64 tokens: model creation, 5 steps

Run from the repository root (with the package built or installed):

    PYTHONPATH=build-torch/python .venv/bin/python scripts/record_traces.py [OUT_DIR]

then replay them: build/oclvm replay traces/gpt2_adamw.trace --plot gpt2.svg --compare
"""
import pathlib
import sys

import torch

import oclvm  # noqa: F401  (the opencl device)

_BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
import torch_bench  # noqa: E402  (the models and steps the README's figures time)


def record(path: pathlib.Path, make_step, steps: int) -> None:
    with torch.opencl.memory.record_trace(path):
        step = make_step("opencl")
        for _ in range(steps):
            step()
        del step
    events = sum(1 for line in path.read_text().splitlines() if line and line[0] in "af")
    print(f"{path}: {events} events")


def main() -> int:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "traces")
    out.mkdir(parents=True, exist_ok=True)
    record(out / "mlp_sgd.trace", torch_bench.mlp_step, 20)
    record(out / "gpt2_adamw.trace", torch_bench.gpt2_step, 5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
