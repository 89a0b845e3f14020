"""Records the allocation traces shipped in traces/ with torch.opencl.memory.record_trace, from
the project's own example models (the training steps of bench/torch_bench.py; the first two are
the ones it times):

    traces/mlp_sgd.trace            MLP 32-64-4, SGD with momentum, batch 64: model creation,
                                    20 steps
    traces/gpt2_adamw.trace         GPT-2 4 layers x 128 (transformers, random init), AdamW, batch
                                    8 x 64 tokens: model creation, 5 steps
    traces/transformer_train.trace  GPT-2 4 layers x 512, 8 heads, vocabulary 8192 (transformers,
                                    random init), AdamW, batch 8 x 128 tokens: model creation,
                                    3 steps
    traces/cnn_train.trace          four conv-BatchNorm-ReLU stages and a linear head, SGD with
                                    momentum, batch 32 x 3 x 64 x 64: model creation, 3 steps

and, with the memory history on (torch.opencl.memory._record_memory_history), a snapshot of the
GPT-2 run (model creation, 3 steps) drawn by oclvm.viz as design/snapshot_gpt2_adamw.svg, the
README's picture.

Run from the repository root (with the package built or installed):

    PYTHONPATH=build-torch/python .venv/bin/python scripts/record_traces.py [OUT_DIR [PICTURE]]

then replay them: build/oclvm replay traces/gpt2_adamw.trace --plot gpt2.svg --compare
"""
import pathlib
import sys

from oclvm import viz

import torch

import oclvm  # noqa: F401  (the opencl device)

_BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))
import torch_bench  # noqa: E402  (the models and steps design/performance.md's figures time)


def record(path: pathlib.Path, make_step, steps: int) -> None:
    with torch.opencl.memory.record_trace(path):
        step = make_step("opencl")
        for _ in range(steps):
            step()
        del step
    events = sum(1 for line in path.read_text().splitlines() if line and line[0] in "af")
    print(f"{path}: {events} events")


def _short_filenames(snapshot: dict) -> None:
    """Frames name files relative to the repository or site-packages, not this machine's paths."""
    root = str(pathlib.Path(__file__).resolve().parents[1]) + "/"
    frame_lists = [e["frames"] for trace in snapshot["device_traces"] for e in trace]
    frame_lists += [b["frames"] for s in snapshot["segments"] for b in s["blocks"]]
    for frames in frame_lists:
        for frame in frames:
            name = frame["filename"]
            frame["filename"] = (name.split("site-packages/", 1)[-1] if "site-packages/" in name
                                 else name.removeprefix(root))


def picture(path: pathlib.Path, make_step, steps: int) -> None:
    torch.opencl.empty_cache()
    torch.opencl.memory._record_memory_history(max_entries=1_000_000)
    try:
        step = make_step("opencl")
        for _ in range(steps):
            step()
        snapshot = torch.opencl.memory._snapshot()
        del step
    finally:
        torch.opencl.memory._record_memory_history(enabled=None)
    _short_filenames(snapshot)
    path.write_text(viz.snapshot_svg(snapshot, device=0, max_entries=300))
    print(f"{path}: {len(snapshot['device_traces'][0])} events drawn")


def main() -> int:
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "traces")
    out.mkdir(parents=True, exist_ok=True)
    record(out / "mlp_sgd.trace", torch_bench.mlp_step, 20)
    record(out / "gpt2_adamw.trace", torch_bench.gpt2_step, 5)
    record(out / "transformer_train.trace", torch_bench.transformer_step, 3)
    record(out / "cnn_train.trace", torch_bench.cnn_step, 3)
    picture(pathlib.Path(sys.argv[2] if len(sys.argv) > 2 else "design/snapshot_gpt2_adamw.svg"),
            torch_bench.gpt2_step, 3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
