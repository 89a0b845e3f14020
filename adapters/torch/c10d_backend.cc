// adapters/torch/c10d_backend.cc — see c10d_backend.h.
#include "adapters/torch/c10d_backend.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "oclvm/storage/thread_annotations.h"

namespace oclvm::torch_adapter {
namespace {

// ---- Which device a collective is on ----------------------------------------------------------

void collect(std::vector<const at::Tensor*>& out, const at::Tensor& t) {
  if (t.defined()) out.push_back(&t);
}
void collect(std::vector<const at::Tensor*>& out, const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) collect(out, t);
}
void collect(std::vector<const at::Tensor*>& out,
             const std::vector<std::vector<at::Tensor>>& lists) {
  for (const auto& ts : lists) collect(out, ts);
}

// Checks that every tensor of the collective `name` is on one device, before anything is copied
// or sent: a collective mixing host and device tensors, or two opencl devices, is a caller's
// mistake gloo cannot see once the tensors are staged.
template <typename... Tensors>
void check_one_device(const char* name, const Tensors&... tensors) {
  std::vector<const at::Tensor*> all;
  (collect(all, tensors), ...);
  for (const at::Tensor* t : all) {
    TORCH_CHECK_VALUE(t->device() == all.front()->device(), "oclvm backend: ", name,
                      " got tensors on ", all.front()->device(), " and on ", t->device(),
                      "; every tensor of one collective must be on the same device");
    TORCH_CHECK_VALUE(t->is_cpu() || t->is_privateuseone(), "oclvm backend: ", name,
                      " got a tensor on ", t->device(), "; it moves opencl and cpu tensors");
    TORCH_CHECK_VALUE(t->layout() == at::kStrided, "oclvm backend: ", name,
                      " takes dense tensors, got layout ", t->layout());
  }
}

// ---- Host twins -------------------------------------------------------------------------------

}  // namespace

// Host buffers of finished collectives, kept for later ones of the same byte size. The host
// allocator has no cache: a new buffer is new memory whose first touch costs more than the copy
// into it (64 MiB: ~40 ms of page faults against ~9 ms of copying), and a training loop
// all-reduces buckets of the same sizes every step.
//
// Thread-safety: thread-safe (one mutex): buffers are taken on the issuing thread and given back
// by whichever thread drops the collective's Staging.
class TwinPool {
 public:
  // A contiguous CPU tensor of `sizes` and `dtype` in a host-allocator buffer (pin_memory()),
  // reused when one of the same byte size is free. Made with set_, not as a view of a byte
  // buffer: a view keeps its base (and so a second reference to the buffer) alive.
  at::Tensor take(at::IntArrayRef sizes, at::ScalarType dtype) {
    const auto options = at::TensorOptions().dtype(dtype).pinned_memory(true);
    const size_t bytes = c10::multiply_integers(sizes) * c10::elementSize(dtype);
    std::optional<c10::Storage> buffer;
    {
      MutexLock lock(mutex_);
      auto found = free_.find(bytes);
      if (found != free_.end()) {
        buffer = std::move(found->second);
        free_.erase(found);
        pooled_bytes_ -= bytes;
      }
    }
    if (!buffer) return at::empty(sizes, options);
    return at::empty({0}, options.pinned_memory(false)).set_(*buffer, 0, sizes);
  }

  // Keeps `twin`'s buffer for a later take(), unless that would pool more than kMaxPooledBytes.
  // Only the twins of a collective that succeeded come here (Staging): gloo is done with them,
  // though its finished work may still hold a reference for a moment.
  void give_back(const at::Tensor& twin) {
    const size_t bytes = twin.nbytes();
    if (bytes == 0 || twin.storage().nbytes() != bytes) return;
    MutexLock lock(mutex_);
    if (pooled_bytes_ + bytes > kMaxPooledBytes) return;
    pooled_bytes_ += bytes;
    free_.emplace(bytes, twin.storage());
  }

 private:
  static constexpr size_t kMaxPooledBytes = size_t{512} << 20;

  Mutex mutex_;
  std::multimap<size_t, c10::Storage> free_ OCLVM_GUARDED_BY(mutex_);  // by byte size
  size_t pooled_bytes_ OCLVM_GUARDED_BY(mutex_) = 0;
};

namespace {

// The host twins of one collective (c10d_backend.h): made and filled on the issuing thread,
// copied back into their device tensors by copy_back() on the thread that finishes the work, and
// given back to the pool by succeeded(), once gloo is done and the results are copied back —
// before the work reports, so that the next collective of the same size finds them. A work that
// failed, or one nobody waited for, gives nothing back: gloo's transport may still hold a twin's
// address, so such twins are freed with the Staging, never reused.
class Staging {
 public:
  // `twin_cpu_tensors`: CPU tensors get twins too (PREMUL_SUM scales the twins, never the
  // caller's inputs).
  explicit Staging(std::shared_ptr<TwinPool> pool, bool twin_cpu_tensors = false)
      : pool_(std::move(pool)), twin_cpu_tensors_(twin_cpu_tensors) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  // `t` itself when it is a CPU tensor that needs no twin; else its twin, filled from `t` when
  // `read`, copied back into `t` by copy_back() when `written`.
  at::Tensor twins(const at::Tensor& t, bool read, bool written) {
    if (!t.defined() || (t.is_cpu() && !twin_cpu_tensors_)) return t;
    at::NoGradGuard no_grad;
    if (!stream_ && t.is_privateuseone()) {
      stream_ = c10::impl::VirtualGuardImpl(t.device().type()).getStream(t.device());
    }
    at::Tensor host = t.is_cpu() ? at::empty(t.sizes(), t.scalar_type())
                                 : pool_->take(t.sizes(), t.scalar_type());
    if (read) host.copy_(t);
    twins_.push_back({t, host, written});
    return host;
  }
  std::vector<at::Tensor> twins(const std::vector<at::Tensor>& ts, bool read, bool written) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(twins(t, read, written));
    return out;
  }
  std::vector<std::vector<at::Tensor>> twins(const std::vector<std::vector<at::Tensor>>& lists,
                                             bool read, bool written) {
    std::vector<std::vector<at::Tensor>> out;
    out.reserve(lists.size());
    for (const auto& ts : lists) out.push_back(twins(ts, read, written));
    return out;
  }

  bool empty() const { return twins_.empty(); }

  // Copies every written twin into its tensor, on the stream the collective was issued on.
  void copy_back() const {
    at::NoGradGuard no_grad;
    std::optional<c10::StreamGuard> on_stream;
    if (stream_) on_stream.emplace(*stream_);
    for (const auto& twin : twins_) {
      if (twin.written) twin.tensor.copy_(twin.host);
    }
  }

  // The work's result: the tensors set_result() named (an all_reduce's, a broadcast's: every
  // tensor, read or written, as gloo's works give), else the written ones.
  void set_result(std::vector<at::Tensor> tensors) { result_ = std::move(tensors); }
  std::vector<at::Tensor> result() const {
    if (result_) return *result_;
    std::vector<at::Tensor> out;
    for (const auto& twin : twins_) {
      if (twin.written) out.push_back(twin.tensor);
    }
    return out;
  }

  // gloo finished and every twin was copied back: the twins go back to the pool (once; gloo's
  // finished work may still hold them for a moment, but never touches their bytes again).
  void succeeded() const {
    if (given_back_.exchange(true)) return;
    for (const auto& twin : twins_) {
      if (!twin.tensor.is_cpu()) pool_->give_back(twin.host);
    }
  }

 private:
  struct Twin {
    at::Tensor tensor;  // the caller's
    at::Tensor host;
    bool written;
  };
  const std::shared_ptr<TwinPool> pool_;
  const bool twin_cpu_tensors_;
  std::vector<Twin> twins_;
  std::optional<c10::Stream> stream_;
  std::optional<std::vector<at::Tensor>> result_;
  mutable std::atomic<bool> given_back_{false};
};

// gloo has no PREMUL_SUM: the twins (every tensor is twinned for it, Staging(true)) are scaled by
// the factor here and gloo sums them. Any other op is gloo's own.
bool is_premul_sum(const c10d::ReduceOp& op) { return op.op_ == c10d::ReduceOp::PREMUL_SUM; }

c10d::ReduceOp scale_for_gloo(const c10d::ReduceOp& op, const std::vector<at::Tensor>& twins) {
  if (!is_premul_sum(op)) return op;
  const auto* factor = dynamic_cast<const c10d::PreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK_VALUE(factor != nullptr, "oclvm backend: PREMUL_SUM without a factor");
  at::NoGradGuard no_grad;
  for (const auto& t : twins) {
    if (factor->tensor_factor.defined()) {
      t.mul_(factor->tensor_factor.to(at::kCPU));
    } else {
      t.mul_(factor->double_factor);
    }
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> out;
  for (const auto& ts : lists) out.insert(out.end(), ts.begin(), ts.end());
  return out;
}

// ---- The work ---------------------------------------------------------------------------------

// How a StagedWork learns that gloo is done: from gloo's future, or only by waiting on gloo's
// work (completion_of).
enum class Completion { kFuture, kOnWait };

class StagedWork final : public c10d::Work {
 public:
  StagedWork(int rank, c10d::OpType type, c10::intrusive_ptr<c10d::Work> gloo,
             std::shared_ptr<const Staging> staging, Completion completion)
      : Work(rank, type),
        staging_(std::move(staging)),
        gloo_(std::move(gloo)),
        completion_(completion),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    if (completion_ == Completion::kFuture) {
      // The callback holds what finishing needs, not the work (which may be dropped first).
      auto future = future_;
      auto staging_held = staging_;
      // Nothing may escape: gloo runs this inside its own completion, where a throw ends the
      // process.
      gloo_->getFuture()->addCallback([future, staging_held](c10::ivalue::Future& done) {
        if (done.hasError()) {
          future->setErrorIfNeeded(done.exception_ptr());
        } else {
          finish(*staging_held, *future);
        }
      });
    }
  }

  // Never blocks. gloo's works without a future say they are complete only once waited for,
  // and so does this one then.
  bool isCompleted() override {
    if (completion_ == Completion::kOnWait && !future_->completed() && gloo_->isCompleted()) {
      finish_once(::kNoTimeout);
    }
    return future_->completed();
  }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  int sourceRank() const override { return gloo_->sourceRank(); }
  // As gloo's: the work must be complete (wait() first).
  std::vector<at::Tensor> result() override {
    TORCH_CHECK(isCompleted(), "oclvm backend: the work is not complete; call wait() before "
                               "result()");
    return future_->value().toTensorVector();
  }
  void synchronize() override {}
  void abort() override { gloo_->abort(); }
  // As gloo's: a work whose gloo work has no future (send, recv, reduce_scatter) has none either
  // (it would complete only when someone waited).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    TORCH_CHECK(completion_ == Completion::kFuture,
                "oclvm backend: this collective's work has no future (gloo's has none); call "
                "wait()");
    return future_;
  }

  // Returns once the written tensors hold the result; rethrows gloo's error or the copy's.
  bool wait(std::chrono::milliseconds timeout) override {
    if (completion_ == Completion::kOnWait) {
      finish_once(timeout);
    } else if (timeout != ::kNoTimeout && !future_->completed()) {
      gloo_->wait(timeout);  // gloo's timeout error when it is not done in time
    }
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }

 private:
  // For Completion::kOnWait: waits for gloo, then finishes, once; a gloo error (its timeout) is
  // the work's error from then on.
  void finish_once(std::chrono::milliseconds timeout) {
    std::call_once(waited_, [&] {
      try {
        gloo_->wait(timeout);
      } catch (...) {
        future_->setErrorIfNeeded(std::current_exception());
        return;
      }
      finish(*staging_, *future_);
    });
  }

  // Copies the results back and completes the future; never throws (it runs inside gloo's
  // completion, or inside call_once).
  static void finish(const Staging& staging, c10::ivalue::Future& future) noexcept {
    try {
      staging.copy_back();
      staging.succeeded();
      future.markCompleted(c10::IValue(staging.result()));
    } catch (...) {
      future.setErrorIfNeeded(std::current_exception());  // also when a user completed it
    }
  }

  const std::shared_ptr<const Staging> staging_;
  const c10::intrusive_ptr<c10d::Work> gloo_;
  const Completion completion_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::once_flag waited_;
};

// How gloo's work tells it is done: some of gloo's works (send, recv, reduce_scatter) have no
// future, and say so only by throwing from getFuture().
Completion completion_of(c10d::Work& gloo) {
  try {
    gloo.getFuture();
    return Completion::kFuture;
  } catch (const c10::Error&) {
    return Completion::kOnWait;
  }
}

// gloo's work when nothing was staged (a CPU collective: gloo's own behaviour, no extra cost);
// else a StagedWork that copies the results back.
c10::intrusive_ptr<c10d::Work> staged(int rank, c10d::OpType type,
                                      c10::intrusive_ptr<c10d::Work> gloo,
                                      std::shared_ptr<Staging> staging) {
  if (staging->empty()) return gloo;
  const Completion completion = completion_of(*gloo);
  return c10::make_intrusive<StagedWork>(rank, type, std::move(gloo), std::move(staging),
                                         completion);
}


// An all_reduce cut into chunks (StagingBackend::pipelined_allreduce): one work per chunk. It is
// done when every chunk has settled, successfully or not, so that nothing still writes into the
// tensor once it reports; its future then holds the whole tensor, or the first error. `dense`
// is the contiguous tensor the chunks are views of: the caller's own, or a contiguous copy that
// is copied back into it (on `stream`) when every chunk succeeded.
class ChunkedWork final : public c10d::Work {
 public:
  ChunkedWork(int rank, const at::Tensor& tensor, const at::Tensor& dense,
              std::optional<c10::Stream> stream,
              std::vector<c10::intrusive_ptr<c10d::Work>> chunks, std::exception_ptr staging_error)
      : Work(rank, c10d::OpType::ALLREDUCE),
        chunks_(std::move(chunks)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    auto state = std::make_shared<Settling>();
    state->remaining = chunks_.size();
    state->first_error = staging_error;
    for (const auto& chunk : chunks_) {
      // Nothing may escape: gloo runs this inside its own completion.
      chunk->getFuture()->addCallback([future = future_, state, tensor, dense,
                                       stream](c10::ivalue::Future& done) {
        std::exception_ptr error;
        {
          MutexLock lock(state->mutex);
          if (done.hasError() && !state->first_error) state->first_error = done.exception_ptr();
          if (--state->remaining > 0) return;
          error = state->first_error;
        }
        try {
          if (error) std::rethrow_exception(error);
          if (!dense.is_same(tensor)) {
            at::NoGradGuard no_grad;
            std::optional<c10::StreamGuard> on_stream;
            if (stream) on_stream.emplace(*stream);
            tensor.copy_(dense);
          }
          future->markCompleted(c10::IValue(std::vector<at::Tensor>{tensor}));
        } catch (...) {
          future->setErrorIfNeeded(std::current_exception());
        }
      });
    }
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() && future_->hasError() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override {
    TORCH_CHECK(isCompleted(), "oclvm backend: the work is not complete; call wait() before "
                               "result()");
    return future_->value().toTensorVector();
  }
  void synchronize() override {}
  void abort() override {
    for (const auto& chunk : chunks_) chunk->abort();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // Waits for every chunk (all of them within `timeout` together), then rethrows the first
  // error: a chunk's, a timeout, or the staging's.
  bool wait(std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::exception_ptr first;
    for (const auto& chunk : chunks_) {
      auto left = ::kNoTimeout;
      if (timeout != ::kNoTimeout) {
        left = std::max(std::chrono::milliseconds(1),
                        std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now()));
      }
      try {
        chunk->wait(left);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }

 private:
  struct Settling {
    Mutex mutex;
    size_t remaining OCLVM_GUARDED_BY(mutex) = 0;
    std::exception_ptr first_error OCLVM_GUARDED_BY(mutex);
  };
  const std::vector<c10::intrusive_ptr<c10d::Work>> chunks_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

StagingBackend::StagingBackend(c10::intrusive_ptr<c10d::Backend> gloo, int rank, int size)
    : Backend(rank, size), gloo_(std::move(gloo)), pool_(std::make_shared<TwinPool>()) {
  TORCH_CHECK_VALUE(gloo_, "oclvm backend: no gloo backend given");
  TORCH_CHECK_VALUE(gloo_->getRank() == rank && gloo_->getSize() == size,
                    "oclvm backend: the gloo backend is rank ", gloo_->getRank(), " of ",
                    gloo_->getSize(), ", not rank ", rank, " of ", size);
}

void StagingBackend::setTimeout(std::chrono::milliseconds timeout) { gloo_->setTimeout(timeout); }
void StagingBackend::setSequenceNumberForGroup() { gloo_->setSequenceNumberForGroup(); }
uint64_t StagingBackend::getSequenceNumberForGroup() {
  return gloo_->getSequenceNumberForGroup();
}
c10::intrusive_ptr<c10d::Backend::Options> StagingBackend::getBackendOptions() {
  return gloo_->getBackendOptions();
}

// The common shape of a collective that reads `inputs` and writes `outputs` (each a tensor, a
// list or a list of lists): both checked and staged, the twins handed to `call(outputs, inputs)`,
// which asks gloo for the collective.
template <typename Inputs, typename Outputs, typename Call>
c10::intrusive_ptr<c10d::Work> StagingBackend::stage_and_run(const char* name, c10d::OpType type,
                                                             const Inputs& inputs,
                                                             const Outputs& outputs,
                                                             Call&& call) {
  check_one_device(name, outputs, inputs);
  auto staging = std::make_shared<Staging>(pool_);
  auto in = staging->twins(inputs, /*read=*/true, /*written=*/false);
  auto out = staging->twins(outputs, /*read=*/false, /*written=*/true);
  return staged(getRank(), type, call(out, in), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                         const c10d::BroadcastOptions& opts) {
  check_one_device("broadcast", tensors);
  auto staging = std::make_shared<Staging>(pool_);
  // The root's tensors are read, every other rank's written.
  const bool root = getRank() == opts.rootRank;
  auto twins = staging->twins(tensors, /*read=*/root, /*written=*/!root);
  staging->set_result(tensors);
  return staged(getRank(), c10d::OpType::BROADCAST, gloo_->broadcast(twins, opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  check_one_device("all_reduce", tensors);
  if (tensors.size() == 1 && tensors[0].nbytes() >= 2 * kPipelineChunkBytes) {
    return pipelined_allreduce(tensors[0], opts);
  }
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  auto twins = staging->twins(tensors, true, true);
  staging->set_result(tensors);
  c10d::AllreduceOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, twins);
  return staged(getRank(), c10d::OpType::ALLREDUCE, gloo_->allreduce(twins, gloo_opts), staging);
}

// A large tensor is all-reduced in chunks of kPipelineChunkBytes, each staged and handed to gloo
// as its own all_reduce: gloo reduces chunk k while this thread copies chunk k + 1 to the host,
// and chunk k is copied back as soon as it is done, so only the first chunk's copy and the last
// one's copy back are not hidden behind gloo. Whether and how a tensor is cut depends only on its
// byte size, which every rank shares (as every collective requires), so the ranks issue the same
// chunks; and once the twins exist every chunk is issued, even after a failed copy (the work
// then reports that error), so a rank never falls out of step with the others.
c10::intrusive_ptr<c10d::Work> StagingBackend::pipelined_allreduce(
    const at::Tensor& tensor, const c10d::AllreduceOptions& opts) {
  std::optional<c10::Stream> stream;
  if (tensor.is_privateuseone()) {
    stream = c10::impl::VirtualGuardImpl(tensor.device().type()).getStream(tensor.device());
  }
  at::Tensor dense;
  {
    at::NoGradGuard no_grad;
    dense = tensor.contiguous();
  }
  const at::Tensor flat = dense.view({-1});
  const int64_t per_chunk = kPipelineChunkBytes / tensor.element_size();
  struct Chunk {
    at::Tensor part;
    std::shared_ptr<Staging> staging;
    at::Tensor twin;
  };
  std::vector<Chunk> parts;
  for (int64_t start = 0; start < flat.numel(); start += per_chunk) {
    Chunk chunk{flat.narrow(0, start, std::min(per_chunk, flat.numel() - start)),
                std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp)), {}};
    chunk.twin = chunk.staging->twins(chunk.part, /*read=*/false, /*written=*/true);
    parts.push_back(std::move(chunk));
  }
  std::exception_ptr staging_error;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& chunk : parts) {
    c10d::AllreduceOptions gloo_opts = opts;
    std::vector<at::Tensor> twin{chunk.twin};
    try {
      at::NoGradGuard no_grad;
      if (!chunk.twin.is_same(chunk.part)) chunk.twin.copy_(chunk.part);
      gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, twin);
    } catch (...) {
      if (!staging_error) staging_error = std::current_exception();
      gloo_opts.reduceOp = c10d::ReduceOp(c10d::ReduceOp::SUM);  // issued all the same
    }
    works.push_back(staged(getRank(), c10d::OpType::ALLREDUCE, gloo_->allreduce(twin, gloo_opts),
                           chunk.staging));
  }
  return c10::make_intrusive<ChunkedWork>(getRank(), tensor, dense, stream, std::move(works),
                                          staging_error);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  check_one_device("all_reduce_coalesced", tensors);
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  auto twins = staging->twins(tensors, true, true);
  staging->set_result(tensors);
  c10d::AllreduceCoalescedOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, twins);
  return staged(getRank(), c10d::OpType::ALLREDUCE_COALESCED,
                gloo_->allreduce_coalesced(twins, gloo_opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::reduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::ReduceOptions& opts) {
  check_one_device("reduce", tensors);
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  const bool root = getRank() == opts.rootRank;
  auto twins = staging->twins(tensors, /*read=*/true, /*written=*/root);
  staging->set_result(tensors);
  c10d::ReduceOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, twins);
  return staged(getRank(), c10d::OpType::REDUCE, gloo_->reduce(twins, gloo_opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return stage_and_run("all_gather", c10d::OpType::ALLGATHER, inputs, outputs,
                       [&](auto& out, auto& in) { return gloo_->allgather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  return stage_and_run("all_gather_into_tensor", c10d::OpType::_ALLGATHER_BASE, input, output,
                       [&](auto& out, auto& in) { return gloo_->_allgather_base(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return stage_and_run("all_gather_coalesced", c10d::OpType::ALLGATHER_COALESCED, inputs, outputs,
                       [&](auto& out, auto& in) {
                         return gloo_->allgather_coalesced(out, in, opts);
                       });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  return stage_and_run("all_gather_into_tensor_coalesced", c10d::OpType::COALESCED, inputs, outputs,
                       [&](auto& out, auto& in) {
                         return gloo_->allgather_into_tensor_coalesced(out, in, opts);
                       });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  return stage_and_run("gather", c10d::OpType::GATHER, inputs, outputs,
                       [&](auto& out, auto& in) { return gloo_->gather(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  return stage_and_run("scatter", c10d::OpType::SCATTER, inputs, outputs,
                       [&](auto& out, auto& in) { return gloo_->scatter(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_one_device("reduce_scatter", outputs, inputs);
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  auto in = staging->twins(inputs, true, false);
  auto out = staging->twins(outputs, false, true);
  c10d::ReduceScatterOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, flatten(in));
  return staged(getRank(), c10d::OpType::REDUCE_SCATTER,
                gloo_->reduce_scatter(out, in, gloo_opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_one_device("reduce_scatter_tensor", output, input);
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  auto in = staging->twins(input, true, false);
  auto out = staging->twins(output, false, true);
  c10d::ReduceScatterOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, {in});
  return staged(getRank(), c10d::OpType::_REDUCE_SCATTER_BASE,
                gloo_->_reduce_scatter_base(out, in, gloo_opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  check_one_device("reduce_scatter_tensor_coalesced", outputs, inputs);
  auto staging = std::make_shared<Staging>(pool_, is_premul_sum(opts.reduceOp));
  auto in = staging->twins(inputs, true, false);
  auto out = staging->twins(outputs, false, true);
  c10d::ReduceScatterOptions gloo_opts = opts;
  gloo_opts.reduceOp = scale_for_gloo(opts.reduceOp, in);
  return staged(getRank(), c10d::OpType::REDUCE_SCATTER_TENSOR_COALESCED,
                gloo_->reduce_scatter_tensor_coalesced(out, in, gloo_opts), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes, const c10d::AllToAllOptions& opts) {
  return stage_and_run("all_to_all_single", c10d::OpType::ALLTOALL_BASE, input, output,
                       [&](auto& out, auto& in) {
                         return gloo_->alltoall_base(out, in, output_split_sizes,
                                                     input_split_sizes, opts);
                       });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllToAllOptions& opts) {
  return stage_and_run("all_to_all", c10d::OpType::ALLTOALL, inputs, outputs,
                       [&](auto& out, auto& in) { return gloo_->alltoall(out, in, opts); });
}

c10::intrusive_ptr<c10d::Work> StagingBackend::send(std::vector<at::Tensor>& tensors,
                                                    int dst_rank, int tag) {
  check_one_device("send", tensors);
  auto staging = std::make_shared<Staging>(pool_);
  auto twins = staging->twins(tensors, true, false);
  staging->set_result(tensors);
  return staged(getRank(), c10d::OpType::SEND, gloo_->send(twins, dst_rank, tag), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::recv(std::vector<at::Tensor>& tensors,
                                                    int src_rank, int tag) {
  check_one_device("recv", tensors);
  auto staging = std::make_shared<Staging>(pool_);
  auto twins = staging->twins(tensors, false, true);
  staging->set_result(tensors);
  return staged(getRank(), c10d::OpType::RECV, gloo_->recv(twins, src_rank, tag), staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                             int tag) {
  check_one_device("recv", tensors);
  auto staging = std::make_shared<Staging>(pool_);
  auto twins = staging->twins(tensors, false, true);
  staging->set_result(tensors);
  return staged(getRank(), c10d::OpType::RECVANYSOURCE, gloo_->recvAnysource(twins, tag),
                staging);
}

c10::intrusive_ptr<c10d::Work> StagingBackend::barrier(const c10d::BarrierOptions& opts) {
  return gloo_->barrier(opts);
}

void StagingBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  gloo_->monitoredBarrier(opts, wait_all_ranks);
}

}  // namespace oclvm::torch_adapter
