"""Models written by others train on the `opencl` device exactly as on the CPU.

Every model is a small random-initialised configuration built in this file (nothing is
downloaded): transformers' GPT-2 (tied embeddings), BERT masked LM (padding in the attention
mask), T5 (encoder-decoder with labels), ViT, a Llama-style decoder (RoPE, RMSNorm, grouped-query
attention) and Mixtral (a mixture of experts, top-2 of 4, trained with the routers' load-balancing
loss, which counts tokens with torch.histc on int32 off the CPU); GPT-2, Llama and Mixtral also
generate greedily with a KV cache. diffusers' UNet2DConditionModel (cross-attention) trains on the
denoising loss with DDPMScheduler.add_noise, and one DDPMScheduler step runs on the device (an
unconditional UNet2DModel with self-attention is a strict expected failure, for the adapter bug
its reason names); peft's LoRA adapters on GPT-2 (c_attn) and Llama (q_proj, v_proj) train alone
and merge_and_unload folds them in. torch.nn LSTM and GRU language models (dropout between layers)
and a channels-last CNN with BatchNorm2d; then the training machinery around a model: SGD with
momentum, Adam and AdamW with and without foreach, gradient clipping, activation checkpointing
over dropout, bfloat16 autocast, and state_dict round trips through torch.save / torch.load in
both directions.

Every training scenario (tests/torch/model_families_util.py) builds the model on the CPU, moves a
deep copy with `model.to("opencl")`, makes the device optimizer before or after that move, seeds
both sides with torch.manual_seed right before their loops and asserts: equal losses, every
parameter and buffer equal to the CPU's (rtol 1e-5; a bfloat16 tolerance under autocast; on the
native path the float32 tolerances of `EXACT` and `ADAMW_ON_NATIVE`), tied
weights still one Parameter on the device, and device memory back where it started. One test
trains 100 steps and asserts that the allocated bytes do not grow between step 10 and step 100.
"""
import copy
import io
import os
import pathlib
import subprocess
import sys
import warnings

import diffusers
import peft
import pytest
import torch
import transformers
from torch.testing import assert_close
from torch.utils.checkpoint import checkpoint

from model_families_util import (BF16, DEV, EXACT, NATIVE_PATH, Family, assert_memory_returns,
                                 assert_state_close, assert_ties_kept, move_to_device, tie_groups,
                                 to_device, train, train_both_and_compare, without_dropout)

# Device memory after each passing test equals before (tests/torch/conftest.py).
pytestmark = pytest.mark.usefixtures("nothing_leaks")

transformers.logging.set_verbosity_error()
diffusers.logging.set_verbosity_error()

VOCAB = 64

# The tests of the device drawing the CPU's numbers: the host path's stream (the native path's is
# Philox: test_native_random.py).
cpu_stream = pytest.mark.skipif(NATIVE_PATH, reason="the native path draws from Philox: "
                                                    "test_native_random.py")


def seeded(seed, build):
    """`build()` run right after torch.manual_seed(seed): the same initial weights every time. On
    the native path, whose random numbers are the device's own, without dropout
    (model_families_util: "Random numbers") unless `keep_dropout` (bench/family_fallbacks.py
    counts a user's step)."""
    def make(keep_dropout=False):
        torch.manual_seed(seed)
        model = build()
        return without_dropout(model) if NATIVE_PATH and not keep_dropout else model
    return make


# Whether a loss draws its noise on the CPU and moves it: on the native path, whose numbers are not
# the CPU's (model_families_util: "Random numbers"); otherwise, and in bench/family_fallbacks.py,
# which counts a user's step, on the batch's device.
NOISE_ON_CPU = NATIVE_PATH


def noise_device(device):
    return "cpu" if NOISE_ON_CPU else device


def generator(seed=1):
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# transformers

def gpt2_config():
    return transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2,
                                   n_positions=32, bos_token_id=1, eos_token_id=2,
                                   pad_token_id=0)


def causal_lm_batches(n):
    """Token ids that are their own labels, without an attention mask (Mixtral then counts the
    tokens per expert with torch.histc; with a mask it takes scatter_add_)."""
    g = generator()
    batches = []
    for _ in range(n):
        ids = torch.randint(3, VOCAB, (4, 12), generator=g)
        batches.append({"input_ids": ids, "labels": ids})
    return batches


def padded_tokens(g, lengths, width):
    """Token ids (3..VOCAB) and an attention mask for sequences of `lengths`, padded with 0."""
    ids = torch.randint(3, VOCAB, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return ids * mask, mask


def bert_batches(n):
    g = generator()
    batches = []
    for _ in range(n):
        ids, mask = padded_tokens(g, [12, 9, 6, 12], 12)
        chosen = (torch.rand(ids.shape, generator=g) < 0.3) & mask.bool()
        chosen[:, 0] = True                                    # at least one label per row
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        batches.append({"input_ids": torch.where(chosen, torch.ones_like(ids), ids),  # 1: [MASK]
                        "attention_mask": mask, "labels": labels})
    return batches


def t5_batches(n):
    g = generator()
    batches = []
    for _ in range(n):
        ids, mask = padded_tokens(g, [10, 7, 4], 10)
        labels, label_mask = padded_tokens(g, [6, 3, 5], 6)
        batches.append({"input_ids": ids, "attention_mask": mask,
                        "labels": labels.masked_fill(label_mask == 0, -100)})
    return batches


def vit_batches(n):
    g = generator()
    return [{"pixel_values": torch.randn(4, 3, 16, 16, generator=g),
             "labels": torch.randint(0, 5, (4,), generator=g)} for _ in range(n)]


def hf_loss(model, batch):
    return model(**batch).loss


def build_gpt2():
    return transformers.GPT2LMHeadModel(gpt2_config())


def build_bert():
    return transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=32, pad_token_id=0))


def build_t5():
    return transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2,
        num_heads=2, relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0,
        eos_token_id=2))


def build_vit():
    return transformers.ViTForImageClassification(transformers.ViTConfig(
        image_size=16, patch_size=4, num_channels=3, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=64, hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, num_labels=5))


GPT2 = Family("gpt2", seeded(11, build_gpt2), causal_lm_batches, hf_loss)
BERT = Family("bert_mlm", seeded(12, build_bert), bert_batches, hf_loss)
T5 = Family("t5", seeded(13, build_t5), t5_batches, hf_loss)
VIT = Family("vit", seeded(14, build_vit), vit_batches, hf_loss)


def build_llama():
    """RoPE, RMSNorm, a SwiGLU MLP and grouped-query attention: 4 query heads share 2 key/value
    heads."""
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32, bos_token_id=1,
        eos_token_id=2, pad_token_id=0))


def build_mixtral():
    """Llama's layers with a mixture of 4 experts, 2 per token, in place of the MLP (transformers'
    default "grouped_mm" experts). output_router_logits=True adds the routers' load-balancing
    loss (router_aux_loss_coef times aux_loss) to the loss; off the CPU, aux_loss counts the tokens
    per expert with torch.histc on int32."""
    return transformers.MixtralForCausalLM(transformers.MixtralConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        max_position_embeddings=32, output_router_logits=True, router_aux_loss_coef=0.02,
        bos_token_id=1, eos_token_id=2, pad_token_id=0))


LLAMA = Family("llama_gqa", seeded(15, build_llama), causal_lm_batches, hf_loss)
MIXTRAL = Family("mixtral_moe", seeded(16, build_mixtral), causal_lm_batches, hf_loss)


# ---------------------------------------------------------------------------------------------
# diffusers

def build_unet():
    """A two-level UNet2DConditionModel: ResNet blocks with GroupNorm, cross-attention to a
    5-token text embedding in the first down block and the last up block, and a timestep
    embedding."""
    return diffusers.UNet2DConditionModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, norm_num_groups=8, cross_attention_dim=16, attention_head_dim=8,
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))


def latent_batches(n):
    g = generator()
    return [{"latents": torch.randn(2, 4, 8, 8, generator=g),
             "text": torch.randn(2, 5, 16, generator=g)} for _ in range(n)]


def ddpm():
    """A fresh scheduler per use: add_noise keeps its alphas_cumprod on the samples' device."""
    return diffusers.DDPMScheduler(num_train_timesteps=1000)


def denoising_loss(model, batch):
    """diffusers' training step: noise and timesteps drawn on the batch's device, the noisy
    latents from DDPMScheduler.add_noise, and the MSE of the predicted noise."""
    latents = batch["latents"]
    scheduler = ddpm()
    drawn_on = noise_device(latents.device)
    noise = torch.randn(latents.shape, device=drawn_on).to(latents.device)
    timesteps = torch.randint(0, scheduler.config.num_train_timesteps, (latents.shape[0],),
                              device=drawn_on).to(latents.device)
    noisy = scheduler.add_noise(latents, noise, timesteps)
    text = batch["text"]
    predicted = (model(noisy, timesteps) if text is None
                 else model(noisy, timesteps, encoder_hidden_states=text)).sample
    return torch.nn.functional.mse_loss(predicted, noise)


def build_unet_self_attention():
    """An unconditional UNet2DModel with self-attention in the second down block, the mid block
    and the first up block: diffusers' Attention on 4-d input gives back channels-last strides
    (a transpose reshaped), so the GroupNorm after it normalises a channels-last tensor."""
    return diffusers.UNet2DModel(
        sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64),
        layers_per_block=1, norm_num_groups=8, attention_head_dim=8,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def unconditional_denoising_loss(model, batch):
    return denoising_loss(model, {**batch, "text": None})


UNET = Family("unet2d_conditional", seeded(17, build_unet), latent_batches, denoising_loss)
UNET_SELF_ATTENTION = Family("unet2d_self_attention", seeded(18, build_unet_self_attention),
                             latent_batches, unconditional_denoising_loss)


# ---------------------------------------------------------------------------------------------
# peft

def with_lora(build, **config):
    """`build()`'s model wrapped by peft.get_peft_model with rank-4 LoRA adapters (dropout 0.1)
    on `target_modules`; every other parameter is frozen."""
    def make():
        model = build()
        with warnings.catch_warnings():
            # peft 0.21 reads transformers' deprecated `is_gradient_checkpointing`
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated",
                                    FutureWarning)
            return peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8,
                                                              lora_dropout=0.1, **config))
    return make


# GPT-2's c_attn is a transformers Conv1D, whose weight is stored transposed (fan_in_fan_out)
LORA_GPT2 = Family("lora_gpt2", seeded(41, with_lora(build_gpt2, target_modules=["c_attn"],
                                                     fan_in_fan_out=True)),
                   causal_lm_batches, hf_loss)
LORA_LLAMA = Family("lora_llama", seeded(42, with_lora(build_llama,
                                                       target_modules=["q_proj", "v_proj"])),
                    causal_lm_batches, hf_loss)


# ---------------------------------------------------------------------------------------------
# torch.nn

class RecurrentLM(torch.nn.Module):
    """Embedding -> two-layer nn.LSTM or nn.GRU (batch_first, dropout between layers) -> Linear."""

    def __init__(self, cell: str):
        super().__init__()
        self.embed = torch.nn.Embedding(40, 16)
        rnn = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[cell]
        self.rnn = rnn(16, 24, num_layers=2, batch_first=True, dropout=0.25)
        self.head = torch.nn.Linear(24, 40)

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out)


def lm_batches(n):
    g = generator()
    return [torch.randint(0, 40, (4, 10), generator=g) for _ in range(n)]


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return torch.nn.functional.cross_entropy(logits.reshape(-1, 40), tokens[:, 1:].reshape(-1))


def build_cnn():
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))
    return model.to(memory_format=torch.channels_last)


def image_batches(n):
    g = generator()
    return [(torch.randn(4, 3, 12, 12, generator=g).contiguous(memory_format=torch.channels_last),
             torch.randint(0, 4, (4,), generator=g)) for _ in range(n)]


def classify_loss(model, batch):
    images, labels = batch
    return torch.nn.functional.cross_entropy(model(images), labels)


LSTM = Family("lstm_lm", seeded(21, lambda: RecurrentLM("lstm")), lm_batches, lm_loss)
GRU = Family("gru_lm", seeded(22, lambda: RecurrentLM("gru")), lm_batches, lm_loss)
CNN = Family("cnn_bn_channels_last", seeded(23, build_cnn), image_batches, classify_loss)


# ---------------------------------------------------------------------------------------------
# a small MLP for the optimizer, clipping, autocast and memory tests

def build_mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.LayerNorm(32), torch.nn.GELU(), torch.nn.Dropout(0.2),
        torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))


def regression_batches(n):
    g = generator()
    return [(torch.randn(8, 12, generator=g), torch.randn(8, 5, generator=g)) for _ in range(n)]


def mse_loss(model, batch):
    x, y = batch
    return torch.nn.functional.mse_loss(model(x).float(), y)


class CheckpointedMLP(torch.nn.Module):
    """A block with dropout run through torch.utils.checkpoint (non-reentrant, RNG preserved)."""

    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(12, 32)
        self.block = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.GELU(),
                                         torch.nn.Dropout(0.3), torch.nn.Linear(32, 32))
        self.out = torch.nn.Linear(32, 5)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = h + checkpoint(self.block, h, use_reentrant=False)
        return self.out(h)


MLP = Family("mlp", seeded(31, build_mlp), regression_batches, mse_loss)
CHECKPOINTED = Family("checkpointed_mlp", seeded(32, CheckpointedMLP), regression_batches,
                      mse_loss)


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3)


def adamw_trainable(params):
    """AdamW over the parameters that require gradients, as peft's examples make it."""
    return adamw([p for p in params if p.requires_grad])


# ---------------------------------------------------------------------------------------------
# the tests

FAMILIES = [GPT2, BERT, T5, VIT, LLAMA, MIXTRAL, UNET, LORA_GPT2, LORA_LLAMA, LSTM, GRU, CNN]
by_name = pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
both_orders = pytest.mark.parametrize("optimizer_before_move", [False, True],
                                      ids=["opt_after_to", "opt_before_to"])


@by_name
def test_to_keeps_parameters_and_ties(family):
    """Module.to(device) keeps every Parameter object (as on CUDA: an optimizer made before
    still holds the model's parameters) and keeps tied parameters one Parameter."""
    def scenario():
        model = family.build()
        groups = tie_groups(model)
        before = {name: p for name, p in model.named_parameters(remove_duplicate=False)}
        model.to(DEV)
        replaced = [name for name, p in model.named_parameters(remove_duplicate=False)
                    if p is not before[name]]
        assert not replaced, f"Module.to replaced the Parameters {replaced}"
        assert_ties_kept(model, groups)
    assert_memory_returns(scenario)


def cnn_eval_matches(cpu, dev):
    """After training: BatchNorm's running statistics (compared with every buffer) drive eval
    mode, so eval outputs equal the CPU's; the weights kept their channels-last layout."""
    images, _ = image_batches(1)[0]
    cpu.eval()
    dev.eval()
    with torch.no_grad():
        assert_close(dev(images.to(DEV)).cpu(), cpu(images), **EXACT)
    assert dev[0].weight.is_contiguous(memory_format=torch.channels_last)


def mixtral_routing_matches(cpu, dev):
    """After training: in eval mode the logits, every layer's router logits and the
    load-balancing loss (torch.histc on int32 on the device, on float32 on the CPU) equal the
    CPU's."""
    batch = causal_lm_batches(1)[0]
    cpu.eval()
    dev.eval()
    with torch.no_grad():
        expected = cpu(**batch)
        got = dev(**{k: v.to(DEV) for k, v in batch.items()})
    assert got.aux_loss.device.type == DEV
    for name in ("loss", "aux_loss", "logits"):
        assert_close(getattr(got, name).cpu(), getattr(expected, name), **EXACT, msg=name)
    assert len(got.router_logits) == len(expected.router_logits) == 2
    for layer, (g, e) in enumerate(zip(got.router_logits, expected.router_logits)):
        assert_close(g.cpu(), e, **EXACT, msg=f"router_logits of layer {layer}")


def lora_merges_as_on_cpu(family):
    """After training: only the adapters were trainable and only they moved (the base weights
    equal a fresh build's); merge_and_unload folds them into the base weights as on the CPU: the
    merged models' weights and eval logits equal the CPU's, and equal the unmerged model's
    logits."""
    def check(cpu, dev):
        fresh = dict(family.build().named_parameters())
        trainable = [name for name, p in dev.named_parameters() if p.requires_grad]
        assert trainable and all(".lora_" in name for name in trainable), trainable
        for name, p in dev.named_parameters():
            changed = not torch.equal(p.cpu(), fresh[name])
            assert changed == p.requires_grad, (
                f"Expected {name} {'to move' if p.requires_grad else 'to stay'}, but it did not")
        ids = causal_lm_batches(1)[0]["input_ids"]
        cpu.eval()
        dev.eval()
        with torch.no_grad():
            unmerged = dev(input_ids=ids.to(DEV)).logits.cpu()
            merged_cpu = cpu.merge_and_unload()
            merged_dev = dev.merge_and_unload()
            assert not any("lora_" in name for name, _ in merged_dev.named_parameters())
            assert_state_close(merged_dev, merged_cpu)
            expected = merged_cpu(input_ids=ids).logits
            got = merged_dev(input_ids=ids.to(DEV)).logits.cpu()
        assert_close(got, expected, **EXACT)
        assert_close(got, unmerged, **EXACT)
    return check


EXTRA_CHECKS = {CNN.name: cnn_eval_matches, MIXTRAL.name: mixtral_routing_matches,
                LORA_GPT2.name: lora_merges_as_on_cpu(LORA_GPT2),
                LORA_LLAMA.name: lora_merges_as_on_cpu(LORA_LLAMA)}


def optimizer_for(family):
    """AdamW for the transformers and diffusers models (over the adapters only under LoRA), SGD
    with momentum for the torch.nn models."""
    if family in (LORA_GPT2, LORA_LLAMA):
        return adamw_trainable
    return adamw if family in (GPT2, BERT, T5, VIT, LLAMA, MIXTRAL, UNET) else sgd


# On the native path the products are CLBlast's (model_families_util: `EXACT`), and AdamW divides
# each gradient by its own running size: where a gradient is small, the rounding of its sums moves
# the step by a visible fraction of lr (the diffusers UNet's convolutions: 3.7e-5 after three steps
# of lr 1e-3, whose moves reach 3e-3). A wrong kernel moves parameters by the order of lr itself,
# so the allowance stays an absolute tenth of a step, also for parameters near 1 (layer norms).
# Where a gradient element is near zero, the rounding of its sum can flip its sign, and AdamW's
# step for it, a full lr, with it (the UNet's convolutions, one element of 787,844 after three
# steps): one element in ten thousand per tensor may differ by up to a step's size. A wrong kernel
# moves most of a tensor's elements.
ADAMW_ON_NATIVE = dict(rtol=1e-5, atol=1e-4)
ADAMW_OUTLIERS_ON_NATIVE = (1e-4, 1e-3)


@by_name
@both_orders
def test_family_trains_as_on_cpu(family, optimizer_before_move):
    """Three steps give the CPU's losses, parameters and buffers; tied weights stay tied; memory
    comes back."""
    optimizer = optimizer_for(family)
    adamw_on_native = NATIVE_PATH and optimizer is not sgd
    train_both_and_compare(family, optimizer, steps=3, seed=5,
                           optimizer_before_move=optimizer_before_move,
                           tolerance=ADAMW_ON_NATIVE if adamw_on_native else EXACT,
                           outliers=ADAMW_OUTLIERS_ON_NATIVE if adamw_on_native else None,
                           check=EXTRA_CHECKS.get(family.name))


@pytest.mark.parametrize("family", [GPT2, LLAMA, MIXTRAL], ids=lambda f: f.name)
def test_greedy_generation_with_kv_cache(family):
    """generate(do_sample=False, use_cache=True) on the device picks the CPU's tokens (GPT-2's
    learned positions, Llama's rotary positions over a grouped-query cache, Mixtral's routing one
    token at a time)."""
    def scenario():
        cpu = family.build().eval()
        dev = move_to_device(copy.deepcopy(cpu))
        ids, mask = padded_tokens(generator(3), [5, 5], 5)
        kwargs = dict(do_sample=False, use_cache=True, max_new_tokens=8, pad_token_id=0)
        expected = cpu.generate(input_ids=ids, attention_mask=mask, **kwargs)
        got = dev.generate(input_ids=ids.to(DEV), attention_mask=mask.to(DEV), **kwargs)
        assert got.device.type == DEV
        assert torch.equal(got.cpu(), expected), f"{got.cpu().tolist()} vs {expected.tolist()}"
    assert_memory_returns(scenario)


# GroupNorm's backward on a channels-last input: torch's autograd formula for
# aten::native_group_norm (derivatives.yaml) makes the gradient and the input contiguous in
# input.suggest_memory_format() when the device type is "cpu", and in contiguous_format on any
# other device type, CUDA's included. So the device runs the CPU's NCHW kernel where the CPU runs
# its channels-last one: the same sums in another order, float32 rounding apart. Compared within
# Inductor's float32 tolerance, with SGD: AdamW divides each gradient by its own running size, so
# parameters whose gradients are rounding noise (the attention's key bias) move by a whole step
# either way.
ROUNDING = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True to a scalar")
def test_unet_with_self_attention_trains_as_on_cpu():
    failure = None
    try:
        train_both_and_compare(UNET_SELF_ATTENTION, sgd, steps=3, seed=5, tolerance=ROUNDING)
    except AssertionError as e:
        # the failure's traceback would hold the device models past the test (nothing_leaks
        # checks memory after a failure too): raise its message without it
        failure = str(e)
    assert failure is None, failure


def test_ddpm_scheduler_step_as_on_cpu():
    """DDPMScheduler on the device as on the CPU: add_noise at the timesteps of set_timesteps, the
    UNet's noise prediction, and one step of the reverse process, whose variance noise comes from
    a generator of the samples' device."""
    def scenario():
        cpu = UNET.build().eval()
        dev = move_to_device(copy.deepcopy(cpu))
        batch = latent_batches(1)[0]
        noise = torch.randn(batch["latents"].shape, generator=generator(4))

        def one_step(model, device):
            scheduler = ddpm()
            scheduler.set_timesteps(10, device=device)
            t = scheduler.timesteps[2]
            latents, text = batch["latents"].to(device), batch["text"].to(device)
            noisy = scheduler.add_noise(latents, noise.to(device), t.expand(latents.shape[0]))
            with torch.no_grad():
                predicted = model(noisy, t, encoder_hidden_states=text).sample
            out = scheduler.step(predicted, t, noisy,
                                 generator=torch.Generator(noise_device(device)).manual_seed(6))
            return [x.cpu() for x in (noisy, predicted, out.prev_sample,
                                      out.pred_original_sample)]

        expected = one_step(cpu, "cpu")
        got = one_step(dev, DEV)
        for name, g, e in zip(["noisy", "predicted", "prev_sample", "pred_original_sample"],
                              got, expected):
            assert_close(g, e, **EXACT, msg=name)
    assert_memory_returns(scenario)


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "for_loop"])
@pytest.mark.parametrize("optimizer", [
    lambda p, foreach: torch.optim.SGD(p, lr=0.05, momentum=0.9, foreach=foreach),
    lambda p, foreach: torch.optim.Adam(p, lr=1e-2, foreach=foreach),
    lambda p, foreach: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=foreach),
], ids=["sgd_momentum", "adam", "adamw"])
@both_orders
def test_optimizer_steps_as_on_cpu(optimizer, foreach, optimizer_before_move):
    train_both_and_compare(MLP, lambda p: optimizer(p, foreach), steps=5, seed=6,
                           optimizer_before_move=optimizer_before_move)


def test_clip_grad_norm_as_on_cpu():
    # the MLP's gradient norms are far above 0.05, so every step clips
    train_both_and_compare(MLP, sgd, steps=5, seed=7, clip=0.05)


def test_activation_checkpointing_with_dropout_as_on_cpu():
    train_both_and_compare(CHECKPOINTED, sgd, steps=4, seed=8)


@cpu_stream
def test_device_random_stream_is_its_own():
    """As on CUDA, the device draws from its own default generator (with the CPU's algorithm, so
    one seed gives the CPU's dropout masks): torch.manual_seed and torch.opencl.manual_seed seed
    it, CPU draws do not advance it, and torch.opencl.get_rng_state / set_rng_state save and
    restore it (torch.utils.checkpoint's preserve_rng_state saves the device's state with them)."""
    def scenario():
        x = torch.ones(256)
        torch.manual_seed(4)
        expected = torch.nn.functional.dropout(x, 0.5, True)
        torch.manual_seed(4)
        torch.rand(10)                                         # a CPU draw in between
        got = torch.nn.functional.dropout(x.to(DEV), 0.5, True).cpu()
        assert torch.equal(got, expected), "a CPU draw shifted the device's dropout mask"
        torch.opencl.manual_seed(5)
        first = torch.rand(8, device=DEV).cpu()
        torch.opencl.manual_seed(5)
        assert torch.equal(torch.rand(8, device=DEV).cpu(), first)
        state = torch.opencl.get_rng_state()
        first = torch.rand(8, device=DEV).cpu()
        torch.opencl.set_rng_state(state)
        assert torch.equal(torch.rand(8, device=DEV).cpu(), first)
    assert_memory_returns(scenario)


@cpu_stream
def test_explicit_device_generator_as_on_cpu():
    """A torch.Generator of the device passed to a random op gives the CPU generator's numbers."""
    def scenario():
        got = torch.randn(6, device=DEV, generator=torch.Generator(DEV).manual_seed(1))
        assert torch.equal(got.cpu(), torch.randn(6, generator=torch.Generator().manual_seed(1)))
    assert_memory_returns(scenario)


@pytest.mark.parametrize("family", [MLP, GPT2], ids=lambda f: f.name)
def test_bfloat16_autocast_as_on_cpu(family):
    """autocast on the device keeps the CPU's casts: bfloat16 matmuls, float32 parameters.
    Compared with a bfloat16 tolerance (rtol = atol = 2e-2): the two sides run the same kernels
    in the same dtypes only if the device's autocast policy is the CPU's."""
    def check(cpu, dev):
        linear = dev[0] if family is MLP else dev.lm_head
        with torch.autocast(device_type=DEV, dtype=torch.bfloat16):
            y = linear(torch.randn(2, linear.in_features, device=DEV))
        assert y.dtype == torch.bfloat16 and linear.weight.dtype == torch.float32
        if NATIVE_PATH and family is GPT2:  # a bfloat16 step computes every operator natively
            torch.opencl.reset_fallback_counts()
            batch = to_device(family.batches(1)[0], DEV)
            with torch.autocast(device_type=DEV, dtype=torch.bfloat16):
                loss = family.loss(dev, batch)
            loss.backward()
            assert torch.opencl.fallback_counts() == {}
    train_both_and_compare(family, adamw if family is GPT2 else sgd, steps=3, seed=9,
                           autocast_dtype=torch.bfloat16, tolerance=BF16, check=check)


@pytest.mark.parametrize("family", [GPT2, CNN, MIXTRAL], ids=lambda f: f.name)
def test_trains_as_on_cpu_under_deterministic_algorithms(family):
    """torch.use_deterministic_algorithms(True) on both sides (with
    torch.utils.deterministic.fill_uninitialized_memory, on by default): the same losses and
    parameters as the CPU's; an operator the CPU refuses as nondeterministic would be refused
    on the device too (its kernels are the CPU's)."""
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert torch.utils.deterministic.fill_uninitialized_memory
        train_both_and_compare(family, optimizer_for(family), steps=3, seed=7)
    finally:
        torch.use_deterministic_algorithms(before)


def saved(obj) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return buffer


def test_state_dict_round_trips_between_device_and_cpu():
    """A device model's state saved and loaded into a fresh CPU model and a fresh device model
    (map_location "cpu", "opencl" and none), and a CPU model's state loaded onto the device;
    tied weights stay tied and share storage after loading; the optimizer's state moves too:
    training resumed on the CPU from the device's checkpoint equals training continued on the
    device."""
    def scenario():
        dev = move_to_device(GPT2.build())
        groups = tie_groups(dev)
        opt = adamw(dev.parameters())
        batches = GPT2.batches(3)
        train(dev, opt, GPT2, batches[:2], DEV, seed=1)
        state = dev.state_dict()
        checkpoint_bytes = saved({"model": state, "optimizer": opt.state_dict()}).getvalue()

        def loaded(map_location):
            return torch.load(io.BytesIO(checkpoint_bytes), map_location=map_location)

        for map_location, where in [("cpu", "cpu"), (DEV, DEV), (None, DEV)]:
            sd = loaded(map_location)["model"]
            assert all(v.device.type == where for v in sd.values()), map_location
            # state_dict keeps both names of tied weights; they must still share one storage
            tied = ["transformer.wte.weight", "lm_head.weight"]
            if tied[1] in sd:
                assert sd[tied[0]].data_ptr() == sd[tied[1]].data_ptr(), map_location
            fresh = GPT2.build()
            if where == DEV:
                move_to_device(fresh)
            fresh.load_state_dict(sd)
            assert_ties_kept(fresh, groups)
            for name, v in fresh.state_dict().items():
                assert torch.equal(v.cpu(), state[name].cpu()), (map_location, name)

        # CPU -> device: a CPU model's trained state onto a fresh device model
        cpu = GPT2.build()
        train(cpu, adamw(cpu.parameters()), GPT2, batches[:2], "cpu", seed=1)
        sd = torch.load(saved(cpu.state_dict()), map_location=DEV)
        fresh = move_to_device(GPT2.build())
        fresh.load_state_dict(sd)
        assert_ties_kept(fresh, groups)
        assert_state_close(fresh, cpu, dict(rtol=0, atol=0))

        # resume: the device's checkpoint continued on the CPU equals the device continuing
        resumed = GPT2.build()
        checkpoint_cpu = loaded("cpu")
        resumed.load_state_dict(checkpoint_cpu["model"])
        resumed_opt = adamw(resumed.parameters())
        resumed_opt.load_state_dict(checkpoint_cpu["optimizer"])
        expected = train(resumed, resumed_opt, GPT2, batches[2:], "cpu", seed=2)
        got = train(dev, opt, GPT2, batches[2:], DEV, seed=2)
        assert_close(torch.stack(got.losses), torch.stack(expected.losses), **EXACT)
        assert_state_close(dev, resumed)
    assert_memory_returns(scenario)


def test_no_memory_growth_over_100_steps():
    """Allocated bytes after step 10 equal those after step 100 (Adam's state, gradients and the
    autograd graph are all made by step 10; nothing may accumulate after)."""
    def scenario():
        model = move_to_device(MLP.build())
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        seen = {}

        def after_step(i):
            if i + 1 in (10, 100):
                seen[i + 1] = torch.opencl.memory_allocated()
        train(model, opt, MLP, MLP.batches(100), DEV, seed=10, after_step=after_step)
        assert seen[100] == seen[10], f"memory_allocated grew: {seen}"
    assert_memory_returns(scenario)


def test_the_fallback_bench_counts_a_familys_native_step():
    """bench/family_fallbacks.py, which reports each family's CPU kernels on the native path,
    trains a family there and prints its counts; an unknown name is a clear error."""
    script = pathlib.Path(__file__).resolve().parents[2] / "bench" / "family_fallbacks.py"
    env = dict(os.environ, OCLVM_KERNELS="native")
    completed = subprocess.run([sys.executable, str(script), "--families", "gru_lm"], env=env,
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    row = completed.stdout.splitlines()[-1].split()
    assert row[0] == "gru_lm" and int(row[1]) > 0 and row[3].endswith("%"), completed.stdout
    completed = subprocess.run([sys.executable, str(script), "--families", "nope"], env=env,
                               capture_output=True, text=True, timeout=600)
    assert completed.returncode == 2 and "unknown families: nope" in completed.stderr
