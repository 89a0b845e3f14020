"""Whole-model checks of the `opencl` PyTorch device: the device gives the CPU's numbers.

A torch.nn.TransformerEncoderLayer (small d_model, fixed seed) in eval mode (with and without
autograd, so both the fused fast path and the composite path run) and in train mode (dropout 0, so
the result is deterministic): forward output, parameter gradients and input gradients equal the
CPU's. Also an embedding + conv1d + layer-norm model, and a training loop whose state_dict round
trips through the device. All operators run through the CPU fallback, so results match exactly up
to floating-point reassociation (torch.testing.assert_close with default float32 tolerances).
"""
import copy
import gc
import sys

import pytest
import torch
from torch.testing import assert_close

import oclvm

DEV = "opencl"


# Device memory after each passing test equals before (tests/torch/conftest.py).
pytestmark = pytest.mark.usefixtures("nothing_leaks")


def make_encoder_layer(norm_first: bool) -> torch.nn.TransformerEncoderLayer:
    torch.manual_seed(1234)
    return torch.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0,
                                            batch_first=True, norm_first=norm_first)


def inputs():
    gen = torch.Generator().manual_seed(7)
    src = torch.randn(3, 5, 16, generator=gen)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    mask[1, 3:] = True                                        # padding in the second sequence
    return src, mask


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_eval_no_grad(norm_first):
    cpu = make_encoder_layer(norm_first).eval()
    dev = copy.deepcopy(cpu).to(DEV)
    assert all(p.device.type == DEV for p in dev.parameters())
    src, mask = inputs()
    with torch.no_grad():                                     # fused fast path when eligible
        expected = cpu(src, src_key_padding_mask=mask)
        got = dev(src.to(DEV), src_key_padding_mask=mask.to(DEV))
    assert got.device.type == DEV and got.shape == (3, 5, 16)
    got = got.cpu()
    # the fast path returns zeros at padded positions of nested tensors; compare real tokens
    assert_close(got[~mask], expected[~mask])
    del dev, got


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_transformer_encoder_layer_forward_and_gradients(norm_first, mode):
    cpu = make_encoder_layer(norm_first)
    dev = copy.deepcopy(cpu).to(DEV)
    cpu.train(mode == "train")
    dev.train(mode == "train")
    src, mask = inputs()
    src_cpu = src.clone().requires_grad_(True)
    src_dev = src.to(DEV).requires_grad_(True)
    out_cpu = cpu(src_cpu, src_key_padding_mask=mask)
    out_dev = dev(src_dev, src_key_padding_mask=mask.to(DEV))
    assert out_dev.device.type == DEV
    assert_close(out_dev.cpu(), out_cpu)
    weight = torch.linspace(-1, 1, out_cpu.numel()).view(out_cpu.shape)
    (out_cpu * weight).sum().backward()
    (out_dev * weight.to(DEV)).sum().backward()
    assert src_dev.grad is not None and src_dev.grad.device.type == DEV
    assert_close(src_dev.grad.cpu(), src_cpu.grad)
    named_cpu = dict(cpu.named_parameters())
    for name, p in dev.named_parameters():
        assert p.grad is not None and p.grad.device.type == DEV, name
        assert_close(p.grad.cpu(), named_cpu[name].grad, msg=name)
    del dev, out_dev, src_dev, p


def test_transformer_training_steps_match_cpu():
    cpu = make_encoder_layer(False)
    dev = copy.deepcopy(cpu).to(DEV)
    # SGD with momentum, not Adam: Adam divides by sqrt(v) and turns the rounding noise of the
    # (mathematically zero) key-bias gradient into full-size steps.
    opt_cpu = torch.optim.SGD(cpu.parameters(), lr=1e-2, momentum=0.9)
    opt_dev = torch.optim.SGD(dev.parameters(), lr=1e-2, momentum=0.9)
    src, mask = inputs()
    target = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        for model, opt, d in [(cpu, opt_cpu, "cpu"), (dev, opt_dev, DEV)]:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(src.to(d)), target.to(d))
            loss.backward()
            opt.step()
    assert all(s["momentum_buffer"].device.type == DEV for s in opt_dev.state.values())
    sd_dev = dev.state_dict()
    for k, v in cpu.state_dict().items():
        assert sd_dev[k].device.type == DEV
        assert_close(sd_dev[k].cpu(), v, msg=k)
    restored = make_encoder_layer(False)
    restored.load_state_dict({k: v.cpu() for k, v in sd_dev.items()})   # device -> host weights
    for k, v in restored.state_dict().items():
        assert torch.equal(v, sd_dev[k].cpu()), k
    del dev, opt_dev, sd_dev, loss


def test_embedding_layernorm_model():
    torch.manual_seed(5)
    cpu = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.LayerNorm(8), torch.nn.GELU(),
                              torch.nn.Linear(8, 3))
    dev = copy.deepcopy(cpu).to(DEV)
    tokens = torch.randint(0, 50, (4, 11), generator=torch.Generator().manual_seed(2))
    out_cpu = cpu(tokens).transpose(1, 2)
    out_dev = dev(tokens.to(DEV)).transpose(1, 2)
    assert_close(out_dev.cpu(), out_cpu)
    out_cpu.square().mean().backward()
    out_dev.square().mean().backward()
    for (name, p), q in zip(dev.named_parameters(), cpu.parameters()):
        assert_close(p.grad.cpu(), q.grad, msg=name)           # embedding: scattered gradient
    del dev, out_dev, p


@pytest.mark.parametrize("dims", [1, 2])
def test_convolution_matches_cpu(dims):
    """nn.Conv1d / nn.Conv2d reach aten::convolution_overrideable on a PrivateUse1 device."""
    torch.manual_seed(6)
    conv = (torch.nn.Conv1d(4, 6, 3, padding=1) if dims == 1
            else torch.nn.Conv2d(4, 6, 3, padding=1, stride=2))
    conv_dev = copy.deepcopy(conv).to(DEV)
    shape = (2, 4, 9) if dims == 1 else (2, 4, 7, 9)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(4))
    out_cpu = conv(x)
    out_dev = conv_dev(x.to(DEV))
    assert_close(out_dev.cpu(), out_cpu)
    out_cpu.sum().backward()
    out_dev.sum().backward()
    assert_close(conv_dev.weight.grad.cpu(), conv.weight.grad)
    assert_close(conv_dev.bias.grad.cpu(), conv.bias.grad)
    del conv_dev, out_dev


BACKWARD_THREAD_PROBE = """
import threading, torch, oclvm
x = torch.randn(4, 3, device="opencl", requires_grad=True)
threads = []
x.register_hook(lambda grad: threads.append(threading.current_thread() is threading.main_thread()))
(x * 2).sum().backward()
assert torch.equal(x.grad.cpu(), torch.full((4, 3), 2.0))
print(threads[0], torch._C._is_multithreading_enabled())
"""


@pytest.mark.parametrize("setting, expected", [(None, "True False"), ("1", "False True")])
def test_backward_runs_on_the_calling_thread_unless_asked_otherwise(setting, expected):
    # oclvm turns off autograd's per-device threads on the importing thread (design/torch.md,
    # "Backward on the calling thread"); OCLVM_AUTOGRAD_THREADS=1 keeps them.
    import os
    import subprocess
    env = dict(os.environ)
    env.pop("OCLVM_AUTOGRAD_THREADS", None)
    if setting is not None:
        env["OCLVM_AUTOGRAD_THREADS"] = setting
    out = subprocess.run([sys.executable, "-c", BACKWARD_THREAD_PROBE], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == expected.split()
