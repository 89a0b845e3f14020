// adapters/torch/c10d_backend.h — StagingBackend, the c10d backend `oclvm`: torch.distributed
// collectives on opencl tensors, run by gloo on host twins the VM fills and empties.
//
// gloo moves only CPU memory. For each collective the backend gives gloo a host twin of every
// opencl tensor the collective touches (a buffer of the host allocator, pin_memory(), same shape
// and dtype, contiguous), and:
//   1. copies the tensors it reads into their twins on the calling thread, with the device's copy
//      instructions on the thread's current stream of the tensor's device: the copy waits for the
//      work that produced the tensor, as every access on that stream does;
//   2. hands the twins to the gloo backend it wraps, which runs the collective on its own threads
//      and returns at once;
//   3. when gloo's future completes, copies the twins of the tensors it writes back into them, on
//      the stream captured in step 1 (under a c10::StreamGuard on whichever thread completes the
//      future), then completes the work's own future. For gloo's works that have no future
//      (send, recv, reduce_scatter), step 3 runs in wait(), and the work has no future either.
// Twins come from the backend's TwinPool: buffers of collectives that succeeded, reused by byte
// size, up to 512 MiB per backend (per group), freed with the backend and its last work. The
// host allocator does not cache, and a new buffer's first touch costs more than the copy.
// A tensor of at least two 16 MiB chunks is all-reduced chunk by chunk, each chunk its own staged
// gloo all_reduce, so that the copies overlap gloo's work (pipelined_allreduce).
// CPU tensors are handed to gloo as they are, so one backend serves both "cpu" and "opencl" (the
// single-backend init_process_group("oclvm")). A collective mixing devices, or opencl tensors of
// two devices, or sparse tensors, is rejected with a c10 error before anything is copied or sent.
//
// Reductions: every c10d::ReduceOp. gloo has no PREMUL_SUM; the backend multiplies the host twins
// by the factor after step 1 and asks gloo for a SUM.
//
// The work (StagedWork, ChunkedWork): wait() returns once the results are in device memory (so
// everything later on any stream of the device sees them) and rethrows gloo's error (a peer that
// died: its closed connection; one that never joins: gloo's timeout). Its future holds the
// collective's tensors as gloo's does for CPU tensors (an all_reduce's: what DDP's reducer reads;
// the outputs of a gather or scatter, flattened). result() requires a completed work, as gloo's.
//
// Ordering: step 1 happens when the collective is issued, step 3 when gloo is done. Two async
// collectives in flight on the same tensor are therefore not ordered with each other (NCCL
// orders them on the stream); wait for the first before issuing the second.
//
// Thread-safety: a StagingBackend is used as torch uses a c10d backend — collectives are issued
// from one thread at a time in the same order on every rank; its own mutable state is the
// TwinPool (a mutex). A work's staging is written by the issuing thread before gloo starts and
// read by the one thread that runs gloo's completion callback (or wait()); wait(), isCompleted()
// and getFuture() may be called from any thread (they read the c10 future, which locks).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <memory>
#include <vector>

namespace oclvm::torch_adapter {

class TwinPool;  // c10d_backend.cc

class StagingBackend final : public c10d::Backend {
 public:
  // `gloo`: the gloo backend of the same group (same rank and size) that runs every collective.
  StagingBackend(c10::intrusive_ptr<c10d::Backend> gloo, int rank, int size);

  const std::string getBackendName() const override { return "oclvm"; }
  void setTimeout(std::chrono::milliseconds timeout) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  c10::intrusive_ptr<Options> getBackendOptions() override;  // gloo's

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_split_sizes,
                                               std::vector<int64_t>& input_split_sizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src_rank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;

 private:
  // The pipelining unit of a large all_reduce (pipelined_allreduce in c10d_backend.cc).
  static constexpr int64_t kPipelineChunkBytes = int64_t{16} << 20;
  c10::intrusive_ptr<c10d::Work> pipelined_allreduce(const at::Tensor& tensor,
                                                     const c10d::AllreduceOptions& opts);
  template <typename Inputs, typename Outputs, typename Call>
  c10::intrusive_ptr<c10d::Work> stage_and_run(const char* name, c10d::OpType type,
                                               const Inputs& inputs, const Outputs& outputs,
                                               Call&& call);

  c10::intrusive_ptr<c10d::Backend> gloo_;
  std::shared_ptr<TwinPool> pool_;  // shared with the works in flight, which give buffers back
};

}  // namespace oclvm::torch_adapter
