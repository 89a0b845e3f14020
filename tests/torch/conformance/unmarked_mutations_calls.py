"""The hand-written calls of find_unmarked_mutations.py: module and operator calls that carry
state (batch-norm family, RNN/LSTM/GRU and cells, dropout/rrelu/random, quantization observers and
fake-quant, _amp_*, _fused_*, embedding, histogram, sort/unique, index ops, Sobol), which the
OpInfo, module and optimizer databases leave out.
"""
import contextlib
import os

# Judge torch itself, not whatever device backend an installed package would autoload.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402

from unmarked_mutations_core import backward_of  # noqa: E402

# --------------------------------------------------------------------------------------------
# Drivers 3: hand-written calls for state-carrying operators


def hand_written_calls():
    aten = torch.ops.aten
    r = torch.randn
    calls = []

    def add(name, fn):
        fn.label = name
        calls.append((name, fn))

    # --- real modules
    def bn_module(cls, shape, **kw):
        def f():
            for training in (True, False):
                m = cls(shape[1], **kw).train(training)
                x = r(*shape, requires_grad=True)
                m(x).sum().backward()
                m(r(*shape))
        return f
    for cls, shape in ((torch.nn.BatchNorm1d, (4, 3)), (torch.nn.BatchNorm1d, (4, 3, 5)),
                       (torch.nn.BatchNorm2d, (2, 3, 4, 4)), (torch.nn.BatchNorm3d, (2, 3, 2, 2, 2))):
        add(f"module:{cls.__name__}{shape}", bn_module(cls, shape))
        add(f"module:{cls.__name__}{shape}:momentum=None", bn_module(cls, shape, momentum=None))
        add(f"module:{cls.__name__}{shape}:no-affine", bn_module(cls, shape, affine=False))
    add("module:InstanceNorm2d(track)", bn_module(torch.nn.InstanceNorm2d, (2, 3, 4, 4),
                                                  track_running_stats=True, affine=True))
    add("module:InstanceNorm1d(track)", bn_module(torch.nn.InstanceNorm1d, (2, 3, 5),
                                                  track_running_stats=True))

    def bn_channels_last():
        m = torch.nn.BatchNorm2d(3).train()
        m(r(2, 3, 4, 4).contiguous(memory_format=torch.channels_last)).sum().backward()
    add("module:BatchNorm2d(channels_last)", bn_channels_last)

    def bn_bf16():
        m = torch.nn.BatchNorm2d(3).train()
        m(r(2, 3, 4, 4).bfloat16()).float().sum()
    add("module:BatchNorm2d(bf16 input, fp32 stats)", bn_bf16)

    def rnn_modules():
        for cls in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN):
            for kw in ({}, {"num_layers": 2, "dropout": 0.5}, {"bidirectional": True},
                       {"batch_first": True}, {"proj_size": 2} if cls is torch.nn.LSTM else {}):
                for training in (True, False):
                    m = cls(4, 3, **kw).train(training)
                    x = r(5, 2, 4, requires_grad=True)
                    out = m(x)
                    backward_of(out)
                    packed = torch.nn.utils.rnn.pack_padded_sequence(r(5, 2, 4), [5, 3])
                    out = m(packed)
                    backward_of(torch.nn.utils.rnn.pad_packed_sequence(out[0])[0])
        for cls in (torch.nn.LSTMCell, torch.nn.GRUCell, torch.nn.RNNCell):
            m = cls(4, 3)
            backward_of(m(r(2, 4, requires_grad=True)))
    add("module:LSTM/GRU/RNN and cells", rnn_modules)

    def dropouts():
        for cls, shape in ((torch.nn.Dropout, (2, 3, 4)), (torch.nn.Dropout1d, (2, 3, 4)),
                           (torch.nn.Dropout2d, (2, 3, 4, 4)), (torch.nn.Dropout3d, (2, 3, 2, 2, 2)),
                           (torch.nn.AlphaDropout, (2, 3, 4)),
                           (torch.nn.FeatureAlphaDropout, (2, 3, 4, 4))):
            for training in (True, False):
                m = cls(0.5).train(training)
                x = r(*shape, requires_grad=True)
                backward_of(m(x))
        for inplace in (False, True):
            m = torch.nn.RReLU(inplace=inplace).train()
            x = r(3, 4)
            y = m(x)
            m.eval()(r(3, 4))
        x = r(3, 4, requires_grad=True)
        torch.nn.functional.rrelu(x, training=True).sum().backward()
    add("module:Dropout*/RReLU", dropouts)

    def embeddings():
        e = torch.nn.Embedding(10, 3, max_norm=1.0)
        e.weight.data.mul_(5)
        e(torch.tensor([1, 2, 2, 5])).sum().backward()
        e = torch.nn.Embedding(10, 3, padding_idx=0, scale_grad_by_freq=True)
        e(torch.tensor([0, 2, 2, 5])).sum().backward()
        e = torch.nn.Embedding(10, 3, sparse=True)
        e(torch.tensor([0, 2, 2, 5])).sum().backward()
        for mode in ("sum", "mean", "max"):
            b = torch.nn.EmbeddingBag(10, 3, mode=mode, max_norm=1.0)
            b.weight.data.mul_(5)
            b(torch.tensor([1, 2, 4, 5, 4, 3]), torch.tensor([0, 3])).sum().backward()
        b = torch.nn.EmbeddingBag(10, 3, mode="sum")
        b(torch.tensor([1, 2, 4, 5]), torch.tensor([0, 2]),
          per_sample_weights=r(4, requires_grad=True)).sum().backward()
    add("module:Embedding/EmbeddingBag", embeddings)

    def quant_observers():
        from torch.ao.quantization import (FakeQuantize, FusedMovingAvgObsFakeQuantize,
                                           HistogramObserver, MinMaxObserver,
                                           MovingAverageMinMaxObserver,
                                           MovingAveragePerChannelMinMaxObserver,
                                           PerChannelMinMaxObserver)
        for cls in (MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver,
                    MovingAveragePerChannelMinMaxObserver, HistogramObserver):
            o = cls()
            for _ in range(2):
                o(r(4, 3))
            o.calculate_qparams()
        for fq in (FakeQuantize(), FusedMovingAvgObsFakeQuantize(),
                   FakeQuantize(observer=MovingAveragePerChannelMinMaxObserver,
                                qscheme=torch.per_channel_symmetric, dtype=torch.qint8,
                                quant_min=-128, quant_max=127),
                   FusedMovingAvgObsFakeQuantize(observer=MovingAveragePerChannelMinMaxObserver,
                                                 qscheme=torch.per_channel_symmetric,
                                                 dtype=torch.qint8, quant_min=-128, quant_max=127)):
            for _ in range(2):
                x = r(4, 3, requires_grad=True)
                fq(x).sum().backward()
        try:
            from torch.ao.quantization._learnable_fake_quantize import _LearnableFakeQuantize
            lfq = _LearnableFakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0,
                                         quant_max=255)
            x = r(4, 3, requires_grad=True)
            lfq(x).sum().backward()
        except ImportError:
            pass
    add("module:quantization observers/fake-quant", quant_observers)

    def grad_scaler():
        m = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        s = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=1)
        for bad in (False, True, False):
            opt.zero_grad()
            loss = m(r(4, 3)).sum()
            if bad:
                loss = loss * float("inf")
            s.scale(loss).backward()
            s.unscale_(opt)
            s.step(opt)
            s.update()
    add("module:GradScaler(cpu)", grad_scaler)

    def autocast_cpu():
        m = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU())
        with torch.autocast("cpu", dtype=torch.bfloat16):
            m(r(5, 3)).sum()
    add("module:autocast(cpu)", autocast_cpu)

    def transformer():
        for training in (True, False):
            layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
            layer.train(training)
            with torch.no_grad() if not training else contextlib.nullcontext():
                layer(r(2, 3, 8))
            mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).train(training)
            with torch.no_grad() if not training else contextlib.nullcontext():
                x = r(2, 3, 8)
                mha(x, x, x)
        torch.nn.functional.scaled_dot_product_attention(r(2, 2, 3, 4), r(2, 2, 3, 4),
                                                         r(2, 2, 3, 4), dropout_p=0.5)
    add("module:Transformer/MHA/SDPA", transformer)

    def sobol():
        for scramble in (False, True):
            e = torch.quasirandom.SobolEngine(3, scramble=scramble, seed=1)
            e.draw_base2(2)
            e.draw(4)
            e.fast_forward(3)
            e.draw(2)
            e.reset()
    add("module:SobolEngine", sobol)

    def norms_misc():
        lin = torch.nn.utils.parametrizations.spectral_norm(torch.nn.Linear(4, 3))
        lin(r(2, 4)).sum().backward()
        lin = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 3))
        lin(r(2, 4)).sum().backward()
        torch.nn.utils.clip_grad_norm_(lin.parameters(), 0.1)
        torch.nn.utils.clip_grad_value_(lin.parameters(), 0.1)
    add("module:spectral/weight norm, clip_grad", norms_misc)

    # --- direct operator calls
    def bn_direct():
        x = r(4, 3, 5)
        w, b = r(3), r(3)
        for training in (True, False):
            for stats in (True, False) if training else (True,):
                # training=False without running statistics dereferences a null pointer in the
                # CPU kernel (segmentation fault), so that combination is not called
                rm, rv = (r(3), r(3).abs()) if stats else (None, None)
                aten.native_batch_norm.default(x, w, b, rm, rv, training, 0.1, 1e-5)
                o = [torch.empty(0) for _ in range(3)]
                aten.native_batch_norm.out(x, w, b, rm, rv, training, 0.1, 1e-5, out=o[0],
                                           save_mean=o[1], save_invstd=o[2])
            rm, rv = r(3), r(3).abs()
            aten._native_batch_norm_legit.default(x, w, b, rm, rv, training, 0.1, 1e-5)
            if training:  # no_stats with training=False crashes the same way
                aten._native_batch_norm_legit.no_stats(x, w, b, training, 0.1, 1e-5)
            aten._native_batch_norm_legit_functional.default(x, w, b, rm, rv, training, 0.1, 1e-5)
            o = [torch.empty(0) for _ in range(3)]
            aten._native_batch_norm_legit.out(x, w, b, rm, rv, training, 0.1, 1e-5, out=o[0],
                                              save_mean=o[1], save_invstd=o[2])
            if training:
                o = [torch.empty(0) for _ in range(3)]
                aten._native_batch_norm_legit.no_stats_out(x, w, b, training, 0.1, 1e-5,
                                                           out=o[0], save_mean=o[1],
                                                           save_invstd=o[2])
            torch.batch_norm(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
            torch.instance_norm(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
            torch._batch_norm_impl_index(x, w, b, r(3), r(3).abs(), training, 0.1, 1e-5, False)
        rm, rv = r(3), r(3).abs()
        aten._native_batch_norm_legit_no_training.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(3)]
        aten._native_batch_norm_legit_no_training.out(x, w, b, rm, rv, 0.1, 1e-5, out0=o[0],
                                                      out1=o[1], out2=o[2])
        aten._batch_norm_with_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(4)]
        aten._batch_norm_with_update.out(x, w, b, rm, rv, 0.1, 1e-5, out=o[0], save_mean=o[1],
                                         save_invstd=o[2],
                                         reserve=torch.empty(0, dtype=torch.uint8))
        aten._batch_norm_with_update_functional.default(x, w, b, rm, rv, 0.1, 1e-5)
        aten._batch_norm_no_update.default(x, w, b, rm, rv, 0.1, 1e-5)
        o = [torch.empty(0) for _ in range(4)]
        aten._batch_norm_no_update.out(x, w, b, rm, rv, 0.1, 1e-5, out0=o[0], out1=o[1],
                                       out2=o[2], out3=torch.empty(0, dtype=torch.uint8))
        for stats in (True, False):
            rm, rv = (r(3), r(3).abs()) if stats else (None, None)
            aten.batch_norm_update_stats.default(x, rm, rv, 0.1)
            aten.batch_norm_update_stats.out(x, rm, rv, 0.1, out0=torch.empty(0),
                                             out1=torch.empty(0))
        # backward kernels, with saved statistics from a training forward
        rm, rv = r(3), r(3).abs()
        _, sm, si = aten.native_batch_norm.default(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
        g = r(4, 3, 5)
        for train in (True, False):
            aten.native_batch_norm_backward.default(g, x, w, rm, rv, sm, si, train, 1e-5,
                                                    [True, True, True])
            aten.batch_norm_backward.default(g, x, w, rm, rv, sm, si, train, 1e-5,
                                             [True, True, True], torch.empty(0))
        aten._batch_norm_impl_index_backward.default(0, x, g, w, rm, rv, sm, si, True, 1e-5,
                                                     [True, True, True], torch.empty(0))
    add("direct:batch-norm family", bn_direct)

    def dropout_random_direct():
        x = r(4, 5)
        for train in (True, False, None):
            aten.native_dropout.default(x, 0.5, train)
        aten.native_dropout_backward.default(r(4, 5), torch.ones(4, 5, dtype=torch.bool), 2.0)
        for training in (True, False):
            noise = torch.empty(4, 5)
            aten.rrelu_with_noise.default(x, noise, 0.1, 0.3, training)
            # (an out= of the wrong size is not resized in training mode: segmentation fault)
            aten.rrelu_with_noise.out(x, noise, 0.1, 0.3, training, out=torch.empty(4, 5))
            aten.rrelu_with_noise_functional.default(x, noise, 0.1, 0.3, training)
            aten.rrelu_with_noise_backward.default(r(4, 5), x, noise, 0.1, 0.3, training, False)
            aten.rrelu_with_noise_.default(x.clone(), noise, 0.1, 0.3, training)
        p = torch.rand(4, 5)
        aten.bernoulli.default(p)
        aten.bernoulli.p(x, 0.3)
        aten.bernoulli.Tensor(x, p)
        aten.bernoulli.float_out(x, 0.5, out=torch.empty(0)) if hasattr(aten.bernoulli, "float_out") else None
        aten.normal.Tensor_Tensor(x, p)
        aten.normal_functional.default(x)
        aten.multinomial.default(p, 3)
        aten.multinomial.default(p, 3, True)
        aten.poisson.default(p)
        aten.binomial.default(torch.full((4,), 5.0), torch.rand(4))
        aten._standard_gamma.default(p + 0.5)
        aten._sample_dirichlet.default(p + 0.5)
        aten.randperm.default(5)
        aten.randint_like.default(x, 10)
        aten.rand_like.default(x)
        aten.randn_like.default(x)
        for f in ("uniform", "exponential", "geometric", "cauchy", "log_normal", "random",
                  "normal"):
            op = getattr(aten, f, None)
            if op is not None and hasattr(op, "default"):
                try:
                    op.default(p.clone(), **({"p": 0.5} if f == "geometric" else {}))
                except Exception:
                    pass
    add("direct:dropout/rrelu/random", dropout_random_direct)

    def rnn_direct():
        inp, h, c = r(5, 2, 4), r(1, 2, 3), r(1, 2, 3)
        wih, whh, bih, bhh = r(12, 4), r(12, 3), r(12), r(12)
        params = [wih, whh, bih, bhh]
        for train in (True, False):
            torch.lstm(inp, [h, c], params, True, 1, 0.5, train, False, False)
            g_params = [r(9, 4), r(9, 3), r(9), r(9)]
            torch.gru(inp, h, g_params, True, 1, 0.5, train, False, False)
            r_params = [r(3, 4), r(3, 3), r(3), r(3)]
            torch.rnn_tanh(inp, h, r_params, True, 1, 0.5, train, False, False)
            torch.rnn_relu(inp, h, r_params, True, 1, 0.5, train, False, False)
            aten.mkldnn_rnn_layer.default(inp, wih, whh, bih, bhh, h[0], c[0], False, [], 2, 3, 1,
                                          True, False, False, train)
        torch.lstm_cell(r(2, 4), [h[0], c[0]], wih, whh, bih, bhh)
        torch.gru_cell(r(2, 4), h[0], r(9, 4), r(9, 3), r(9), r(9))
        torch.rnn_tanh_cell(r(2, 4), h[0], r(3, 4), r(3, 3), r(3), r(3))
        torch.rnn_relu_cell(r(2, 4), h[0], r(3, 4), r(3, 3), r(3), r(3))
    add("direct:rnn/lstm/gru", rnn_direct)

    def quant_direct():
        x = r(4, 3)
        for obs in (True, False):
            for fq in (True, False):
                rmin, rmax = torch.tensor([float("inf")]), torch.tensor([float("-inf")])
                scale, zp = torch.tensor([1.0]), torch.tensor([0], dtype=torch.int32)
                on = torch.tensor([int(obs)]), torch.tensor([int(fq)])
                aten.fused_moving_avg_obs_fake_quant.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, 0, 255, 0)
                aten._fused_moving_avg_obs_fq_helper.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, 0, 255, 0)
                aten._fused_moving_avg_obs_fq_helper_functional.default(
                    x, on[0], on[1], rmin, rmax, scale, zp, 0.01, 0, 255, 0)
                rmin, rmax = torch.full((4,), float("inf")), torch.full((4,), float("-inf"))
                scale, zp = torch.ones(4), torch.zeros(4, dtype=torch.int32)
                aten._fused_moving_avg_obs_fq_helper.default(x, on[0], on[1], rmin, rmax, scale,
                                                             zp, 0.01, -128, 127, 0, True, True)
        s, z = torch.tensor([0.1]), torch.tensor([0], dtype=torch.int32)
        en = torch.tensor([1], dtype=torch.long)
        aten.fake_quantize_per_tensor_affine.default(x, 0.1, 0, 0, 255)
        aten.fake_quantize_per_tensor_affine.tensor_qparams(x, s, z, 0, 255)
        aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default(x, s, z, en, 0, 255)
        aten.fake_quantize_per_channel_affine.default(x, torch.ones(4) * 0.1,
                                                      torch.zeros(4, dtype=torch.int32), 0, 0, 255)
        aten._fake_quantize_learnable_per_tensor_affine.default(x, s, z.float(), 0, 255)
        aten._choose_qparams_per_tensor.default(x)
        aten.choose_qparams_optimized.default(x.reshape(-1), 12, 20, 0.16, 8)
        q = aten.quantize_per_tensor.default(x, 0.1, 0, torch.quint8)
        aten.dequantize.self(q)
        aten.quantize_per_tensor_dynamic.default(x, torch.quint8, False)
        aten.quantize_per_channel.default(x, torch.ones(4) * 0.1, torch.zeros(4, dtype=torch.long),
                                          0, torch.qint8)
        aten._saturate_weight_to_fp16.default(x)
        aten.int_repr.default(q)
        aten._make_per_tensor_quantized_tensor.default(torch.randint(0, 10, (3,), dtype=torch.uint8),
                                                       0.1, 0)
    add("direct:quantization", quant_direct)

    def amp_direct():
        for bad in (False, True):
            gs = [r(3), r(2, 2)]
            if bad:
                gs[1][0, 0] = float("nan")
            found = torch.zeros(1)
            inv = torch.tensor([0.5])
            aten._amp_foreach_non_finite_check_and_unscale_.default(gs, found, inv)
            aten._amp_foreach_non_finite_check_and_unscale.default([g.clone() for g in gs],
                                                                   torch.zeros(1), inv)
            aten._amp_foreach_non_finite_check_and_unscale.out(
                [g.clone() for g in gs], torch.zeros(1), inv, out=[torch.empty(0), torch.empty(0)])
            for found_v in (0.0, 1.0):
                for tracker in (0, 1):
                    scale = torch.tensor([4.0])
                    gt = torch.tensor([tracker], dtype=torch.int32)
                    fi = torch.tensor([found_v])
                    aten._amp_update_scale_.default(scale, gt, fi, 2.0, 0.5, 2)
                    aten._amp_update_scale.default(torch.tensor([4.0]),
                                                   torch.tensor([tracker], dtype=torch.int32),
                                                   fi, 2.0, 0.5, 2)
                    aten._amp_update_scale.out(torch.tensor([4.0]),
                                               torch.tensor([tracker], dtype=torch.int32), fi,
                                               2.0, 0.5, 2, out=torch.empty(0))
    add("direct:_amp_*", amp_direct)

    def fused_optim_direct():
        def lists(n):
            return [[r(3), r(2)] for _ in range(n)]
        for scaled in (False, True):
            gsc = torch.tensor([2.0]) if scaled else None
            fi = torch.tensor([0.0]) if scaled else None
            for amsgrad in (False, True):
                for op in ("_fused_adam", "_fused_adamw"):
                    pk = getattr(aten, op + "_")
                    ps, gr, ea, es, ms = lists(5)
                    if not amsgrad:
                        ms = []
                    steps = [torch.tensor(1.0), torch.tensor(1.0)]
                    pk.default(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                               weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                               grad_scale=gsc, found_inf=fi)
                    pk.tensor_lr(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                 beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                 maximize=False, grad_scale=gsc, found_inf=fi)
                    fn = getattr(aten, op)
                    fn.default(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                               weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                               grad_scale=gsc, found_inf=fi)
                    fn.tensor_lr(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                 beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                 maximize=False, grad_scale=gsc, found_inf=fi)
                    fn.out(ps, gr, ea, es, ms, steps, lr=0.1, beta1=0.9, beta2=0.99,
                           weight_decay=0.01, eps=1e-8, amsgrad=amsgrad, maximize=False,
                           grad_scale=gsc, found_inf=fi, out=[torch.empty(0), torch.empty(0)])
                    fn.tensor_lr_out(ps, gr, ea, es, ms, steps, lr=torch.tensor(0.1), beta1=0.9,
                                     beta2=0.99, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                                     maximize=False, grad_scale=gsc, found_inf=fi,
                                     out=[torch.empty(0), torch.empty(0)])
            for first in (False, True):
                ps, gr, mb = lists(3)
                aten._fused_sgd_.default(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                         dampening=0.0, nesterov=False, maximize=False,
                                         is_first_step=first, grad_scale=gsc, found_inf=fi)
                aten._fused_sgd_.tensor_lr(ps, gr, mb, weight_decay=0.01, momentum=0.9,
                                           lr=torch.tensor(0.1), dampening=0.0, nesterov=True,
                                           maximize=False, is_first_step=first, grad_scale=gsc,
                                           found_inf=fi)
                aten._fused_sgd.default(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                        dampening=0.0, nesterov=False, maximize=False,
                                        is_first_step=first, grad_scale=gsc, found_inf=fi)
                aten._fused_sgd.out(ps, gr, mb, weight_decay=0.01, momentum=0.9, lr=0.1,
                                    dampening=0.0, nesterov=False, maximize=False,
                                    is_first_step=first, grad_scale=gsc, found_inf=fi,
                                    out=[torch.empty(0), torch.empty(0)])
            ps, gr, ss = lists(3)
            steps = [torch.tensor(1.0), torch.tensor(1.0)]
            aten._fused_adagrad_.default(ps, gr, ss, steps, lr=0.1, lr_decay=0.0,
                                         weight_decay=0.01, eps=1e-10, maximize=False,
                                         grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad_.tensor_lr(ps, gr, ss, steps, lr=torch.tensor(0.1), lr_decay=0.0,
                                           weight_decay=0.01, eps=1e-10, maximize=False,
                                           grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad.default(ps, gr, ss, steps, lr=0.1, lr_decay=0.0,
                                        weight_decay=0.01, eps=1e-10, maximize=False,
                                        grad_scale=gsc, found_inf=fi)
            aten._fused_adagrad.tensor_lr(ps, gr, ss, steps, lr=torch.tensor(0.1), lr_decay=0.0,
                                          weight_decay=0.01, eps=1e-10, maximize=False,
                                          grad_scale=gsc, found_inf=fi)
    add("direct:_fused_* optimizers", fused_optim_direct)

    def embedding_direct():
        w = r(10, 3) * 5
        idx = torch.tensor([1, 2, 2, 7])
        aten.embedding_renorm_.default(w.clone(), idx, 1.0, 2.0)
        aten.embedding_renorm.default(w, idx, 1.0, 2.0)
        aten.embedding.default(w, idx, 0, True, False)
        aten.embedding_dense_backward.default(r(4, 3), idx, 10, 0, True)
        aten.embedding_backward.default(r(4, 3), idx, 10, 0, False, True)
        aten.embedding_backward.default(r(4, 3), idx, 10, 0, True, False)
        off = torch.tensor([0, 2])
        for mode in (0, 1, 2):
            aten._embedding_bag.default(w, idx, off, False, mode, False, None, True)
            aten._embedding_bag_forward_only.default(w, idx, off, False, mode, False, None, False)
            aten.embedding_bag.default(w, idx, off, False, mode, False, None, True)
        psw = r(4)
        aten._embedding_bag.default(w, idx, off, False, 0, False, psw, True)
    add("direct:embedding", embedding_direct)

    def hist_sort_index_direct():
        x = r(20)
        torch.histc(x, 5)
        torch.histogram(x, 5)
        torch.histogram(x, torch.linspace(-2, 2, 6))
        torch.histogramdd(r(10, 2), [3, 3])
        torch.histogramdd(r(10, 2), [torch.linspace(-2, 2, 4), torch.linspace(-2, 2, 4)])
        torch.bincount(torch.tensor([1, 2, 2, 5]), weights=r(4))
        y = r(4, 6)
        for stable in (False, True):
            torch.sort(y, stable=stable, dim=1)
            torch.sort(y, stable=stable, dim=0, descending=True)
        torch.argsort(y), torch.msort(y), torch.topk(y, 2), torch.kthvalue(y, 2)
        torch.median(y), torch.median(y, 1), torch.nanmedian(y), torch.mode(y, 1)
        z = torch.tensor([3, 1, 2, 3, 3, 1])
        torch.unique(z, return_inverse=True, return_counts=True)
        torch.unique(z, sorted=False, return_inverse=True)
        torch.unique(y.round(), dim=1, return_inverse=True, return_counts=True)
        torch.unique_consecutive(z, return_inverse=True, return_counts=True)
        torch.unique_consecutive(y.round(), dim=0, return_inverse=True, return_counts=True)
        aten._unique.default(z, True, True)
        torch.searchsorted(torch.tensor([1, 3, 5, 7]), torch.tensor([2, 6]))
        torch.searchsorted(torch.tensor([7, 1, 5, 3]), torch.tensor([2, 6]),
                           sorter=torch.tensor([1, 3, 2, 0]))
        torch.bucketize(torch.tensor([2, 6]), torch.tensor([1, 3, 5, 7]))
        a = r(5, 3)
        i = torch.tensor([0, 2, 2])
        a.index_put((i,), r(3, 3), accumulate=True)
        aten._index_put_impl_.default(a.clone(), (i,), r(3, 3), True, False)
        aten._unsafe_index_put.default(a, [i], r(3, 3), True)
        aten._unsafe_index.Tensor(a, [i])
        a.index_add(0, i, r(3, 3)), a.index_copy(0, torch.tensor([0, 1, 4]), r(3, 3))
        a.index_fill(0, i, 1.0), a.index_reduce(0, i, r(3, 3), "prod")
        a.scatter_reduce(0, torch.tensor([[0, 1, 2]]), r(1, 3), "amax")
        a.put(torch.tensor([0, 3]), r(2), accumulate=True)
        a.masked_scatter(a > 0, r(15))
        torch.take_along_dim(a, torch.tensor([[0], [1], [2], [0], [1]]), 1)
        torch.nonzero(a > 0), torch.nonzero_static(a > 0, size=4)
        torch.segment_reduce(r(6), "sum", lengths=torch.tensor([2, 4]))
    add("direct:histogram/sort/unique/index", hist_sort_index_direct)

    def sobol_direct():
        sv, _ = torch._sobol_engine_initialize_state_(torch.zeros(3, 30, dtype=torch.long), 3), None
        quasi = torch.zeros(3, dtype=torch.long)
        torch._sobol_engine_draw(quasi, 4, sv, 3, 0, torch.float32)
        torch._sobol_engine_ff_(quasi.clone(), 3, sv, 3, 0)
        torch._sobol_engine_scramble_(sv.clone(), torch.randint(0, 2, (3, 30, 30)), 3)
    add("direct:sobol", sobol_direct)

    def sparse_direct():
        i = torch.tensor([[0, 1, 1, 0], [2, 0, 0, 2]])
        v = r(4)
        s = torch.sparse_coo_tensor(i, v, (2, 3))  # uncoalesced, with duplicates
        for f in (lambda t: t.coalesce(), lambda t: t.to_dense(), lambda t: torch.sparse.sum(t),
                  lambda t: t + t, lambda t: t * 2, lambda t: torch.mm(t, r(3, 2)),
                  lambda t: torch.sparse.mm(t, r(3, 2)), lambda t: t.t(),
                  lambda t: torch.addmm(r(2, 2), t, r(3, 2)), lambda t: t.to_sparse_csr(),
                  lambda t: torch.sparse.softmax(t, 1), lambda t: t.sum(1),
                  lambda t: torch.sparse.log_softmax(t, 1), lambda t: torch.sparse.sampled_addmm(
                      t.to_dense().to_sparse_csr(), r(2, 4), r(4, 3))):
            try:
                f(s.clone() if f is not None else s)
            except Exception:
                pass
        csr = r(3, 4).relu().to_sparse_csr()
        csr @ r(4, 2), csr.to_dense(), csr.to_sparse_coo(), csr + csr
    add("direct:sparse", sparse_direct)

    def linalg_direct():
        a = r(4, 4)
        spd = a @ a.T + 4 * torch.eye(4)
        b = r(4, 2)
        for f in (torch.linalg.lstsq, torch.linalg.solve, torch.linalg.solve_ex):
            f(a, b)
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelsd")
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelsy")
        torch.linalg.lstsq(r(5, 3), r(5, 2), driver="gelss")
        lu, piv = torch.linalg.lu_factor(a)
        torch.linalg.lu_solve(lu, piv, b), torch.lu_unpack(lu, piv)
        torch.linalg.cholesky_ex(spd), torch.cholesky_solve(b, torch.linalg.cholesky(spd))
        torch.linalg.ldl_factor(spd), torch.linalg.eigh(spd), torch.linalg.eig(a)
        torch.linalg.svd(a), torch.linalg.qr(a), torch.geqrf(a)
        qr, tau = torch.geqrf(a)
        torch.ormqr(qr, tau, b), torch.linalg.householder_product(qr, tau)
        torch.linalg.solve_triangular(torch.triu(spd), b, upper=True, left=True)
        torch.triangular_solve(b, torch.triu(spd))
        torch.linalg.inv_ex(a), torch.linalg.det(a), torch.linalg.slogdet(a), torch.linalg.pinv(a)
        torch.linalg.matrix_exp(a), torch.linalg.matrix_rank(a)
        torch.fft.irfft(torch.randn(5, dtype=torch.complex64)), torch.fft.hfft(torch.randn(5, dtype=torch.complex64))
        torch.fft.irfftn(torch.randn(4, 5, dtype=torch.complex64))
    add("direct:linalg/fft", linalg_direct)

    def soft(*fns):
        """Runs each call on its own, so that one unsupported call does not hide the rest."""
        failed = []
        for fn in fns:
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                failed.append(f"{fn.__code__.co_firstlineno}: {type(e).__name__}: {str(e)[:80]}")
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(fns)} calls failed: " + " | ".join(failed))

    def gaps():
        # overloads that op_db, module_db and the fuzzer do not reach with valid arguments
        x4 = r(2, 3, 4, 4)
        i8a = torch.randint(-8, 8, (32, 64), dtype=torch.int8)
        i8b = torch.randint(-8, 8, (64, 32), dtype=torch.int8)
        soft(
            lambda: aten._int_mm.default(i8a, i8b),
            lambda: aten._int_mm.out(i8a, i8b, out=torch.empty(32, 32, dtype=torch.int32)),
            lambda: aten._weight_int8pack_mm.default(r(4, 64).bfloat16(),
                                                     torch.randint(-8, 8, (8, 64), dtype=torch.int8),
                                                     r(8).bfloat16()),
            lambda: aten._weight_int4pack_mm_for_cpu.default(
                r(4, 64).bfloat16(),
                aten._convert_weight_to_int4pack_for_cpu.default(
                    torch.randint(0, 16, (16, 64), dtype=torch.int32), 2),
                32, r(2, 16, 2).bfloat16()),
            lambda: aten._embedding_bag_dense_backward.default(
                r(2, 3), torch.tensor([1, 2, 4, 5]), torch.tensor([0, 0, 1, 1]),
                torch.tensor([2, 2]), torch.tensor([0, 0]), 10, False, 0, None, -1),
            lambda: aten._fake_quantize_learnable_per_channel_affine.default(
                r(4, 3), torch.ones(4) * 0.1, torch.zeros(4), 0, 0, 255, 1.0),
            lambda: aten._fake_quantize_learnable_per_channel_affine_backward.default(
                r(4, 3), r(4, 3), torch.ones(4) * 0.1, torch.zeros(4), 0, 0, 255, 1.0),
            lambda: aten._make_per_channel_quantized_tensor.default(
                torch.randint(0, 10, (4, 3), dtype=torch.uint8), torch.ones(4) * 0.1,
                torch.zeros(4, dtype=torch.long), 0),
            lambda: aten.quantize_per_tensor.tensor_qparams(r(4, 3), torch.tensor(0.1),
                                                            torch.tensor(0), torch.quint8),
            lambda: aten.quantize_per_tensor.tensors([r(4, 3), r(2)], torch.tensor([0.1, 0.2]),
                                                     torch.tensor([0, 1]), torch.quint8),
            lambda: aten._masked_softmax_backward.default(r(2, 3), torch.softmax(r(2, 3), 1),
                                                          torch.rand(2, 3) > 0.5, 1),
            lambda: aten._transform_bias_rescale_qkv.default(r(2, 3, 12), r(12), 2),
            lambda: torch.sparse.spdiags(r(2, 4), torch.tensor([0, 1]), (4, 4)),
            lambda: aten.glu_jvp.default(torch.sigmoid(r(2, 2)), r(2, 4), r(2, 4), 1),
            lambda: aten.glu_backward_jvp.default(r(2, 4), r(2, 2), r(2, 4), r(2, 2), r(2, 4), 1),
            lambda: aten.bernoulli_.Tensor(r(3, 4), torch.rand(3, 4)),
            lambda: aten._slow_conv2d_forward.default(x4, r(2, 3, 3, 3), [3, 3], r(2), [1, 1],
                                                      [1, 1]),
            lambda: aten._slow_conv2d_backward.output_mask(
                r(2, 2, 4, 4), x4, r(2, 3, 3, 3), [3, 3], [1, 1], [1, 1], [True, True, True]),
            lambda: aten.slow_conv3d_forward.default(r(1, 3, 4, 4, 4), r(2, 3, 3, 3, 3),
                                                     [3, 3, 3], r(2), [1, 1, 1], [1, 1, 1]),
            lambda: aten.slow_conv_dilated2d.default(x4, r(2, 3, 3, 3), [3, 3], r(2), [1, 1],
                                                     [2, 2], [2, 2]),
            lambda: aten.slow_conv_dilated3d.default(r(1, 3, 4, 4, 4), r(2, 3, 3, 3, 3),
                                                     [3, 3, 3], r(2), [1, 1, 1], [2, 2, 2],
                                                     [2, 2, 2]),
            lambda: aten.slow_conv_transpose3d.default(r(1, 3, 4, 4, 4), r(3, 2, 3, 3, 3),
                                                       [3, 3, 3], r(2)),
            lambda: aten.multilabel_margin_loss_backward.default(
                r(2, 4), r(2, 4), torch.tensor([[1, 3, -1, 0], [0, -1, 0, 0]]), 1,
                *aten.multilabel_margin_loss_forward.default(
                    r(2, 4), torch.tensor([[1, 3, -1, 0], [0, -1, 0, 0]]), 1)[1:]),
            lambda: aten._assert_async.msg(torch.tensor(True), "never"),
            lambda: aten._validate_compressed_sparse_indices.default(
                True, torch.tensor([0, 1, 2]), torch.tensor([0, 1]), 2, 2, 2),
            lambda: aten._fused_sdp_choice.default(r(1, 2, 3, 4), r(1, 2, 3, 4), r(1, 2, 3, 4)),
            lambda: aten.sspaddmm.out(r(3, 3).relu().to_sparse(), r(3, 3).relu().to_sparse(),
                                      r(3, 3), out=torch.empty(0).to_sparse()),
            lambda: aten._scaled_mm.default(r(16, 32).to(torch.float8_e4m3fn),
                                            r(32, 16).to(torch.float8_e4m3fn).t().contiguous().t(),
                                            torch.tensor(1.0), torch.tensor(1.0),
                                            out_dtype=torch.float32),
            lambda: torch.sparse.softmax(r(3, 3).relu().to_sparse().requires_grad_(), 1)
            .to_dense().sum().backward(),
            lambda: torch.sparse.log_softmax(r(3, 3).relu().to_sparse().requires_grad_(), 1)
            .to_dense().sum().backward(),
            lambda: torch.nn.functional.max_unpool2d(*torch.nn.functional.max_pool2d(
                x4, 2, return_indices=True), 2),
            lambda: torch.nn.functional.fractional_max_pool2d(x4, 2, output_ratio=(0.5, 0.5),
                                                              return_indices=True),
        )
    add("direct:overloads the other drivers miss", gaps)

    return calls
