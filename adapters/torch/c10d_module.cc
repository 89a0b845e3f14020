// adapters/torch/c10d_module.cc — the Python extension module `oclvm._c10d`: the c10d backend
// `oclvm` (c10d_backend.h) as a torch.distributed Backend object.
//
// A module of its own, beside `oclvm._C`, because a c10d backend crosses into Python as the
// pybind11 class torch.distributed binds (torch._C._distributed_c10d.Backend): this module links
// pybind11 and libtorch_python, which `_C` does not need. It holds no oclvm code: the backend
// moves tensors with ATen's copy_, which reaches the device through `_C`'s kernels.
// python/oclvm/distributed.py imports it when torch.distributed makes an `oclvm` backend.
//
//   StagingBackend(gloo: torch.distributed.ProcessGroupGloo, rank: int, size: int)
//       the backend of one group, running its collectives through `gloo` (the same group's)
//
// Thread-safety: as StagingBackend; the constructor runs under the GIL.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/utils/pybind.h>

#include "adapters/torch/c10d_backend.h"

PYBIND11_MODULE(_c10d, module) {
  // The base class must be known to pybind11 first: torch.distributed binds it.
  pybind11::module_::import("torch._C._distributed_c10d");
  using oclvm::torch_adapter::StagingBackend;
  pybind11::class_<StagingBackend, c10d::Backend, c10::intrusive_ptr<StagingBackend>>(
      module, "StagingBackend",
      "The c10d backend `oclvm`: collectives on opencl tensors through gloo, staged by the "
      "device's copies.")
      .def(pybind11::init<c10::intrusive_ptr<c10d::Backend>, int, int>(), pybind11::arg("gloo"),
           pybind11::arg("rank"), pybind11::arg("size"));
}
