"""Every way torch serializes a tensor, with device tensors: torch.save in both formats, pickle,
copy.deepcopy, storages, map_location in each of its forms, weights_only, mmap, safetensors, and
checkpoints of the old format made on the CPU. Views keep sharing their storage after a round
trip, as on CUDA.

Before issue 33, pickle and the legacy format failed with "Expected an opencl storage made by
oclvm's allocator, but got one with another deleter": torch copies a storage's bytes through a
storage of its own around the device memory (Note [Storages torch makes around device memory] in
adapters/torch/allocator.cc)."""
import copy
import io
import pickle

import pytest
import torch

import oclvm  # noqa: F401  (registers the device)

DEV = "opencl"
TWO = torch.opencl.device_count() >= 2


def _tensors():
    x = torch.arange(12.0).reshape(3, 4).to(DEV)
    return {"x": x, "row": x[1], "t": x.t(), "i": torch.tensor([1, 2, 3], device=DEV),
            "b": torch.tensor([True, False], device=DEV)}


def _check(loaded, device=DEV, shares=True):
    expected = {k: v.cpu() for k, v in _tensors().items()}
    where = torch.device(device)
    if where.type == DEV and where.index is None:
        where = torch.device(DEV, 0)
    assert set(loaded) == set(expected)
    for key, value in loaded.items():
        assert value.device == where, (key, value.device)
        assert value.dtype == expected[key].dtype
        assert torch.equal(value.cpu(), expected[key]), key
    if not shares:  # pickle reduces each tensor on its own, on the CPU too
        return
    # views of one tensor still share one storage
    assert loaded["row"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    assert loaded["t"].untyped_storage().data_ptr() == loaded["x"].untyped_storage().data_ptr()
    loaded["x"][1, 0] = 100.0
    assert loaded["row"][0].item() == 100.0


def _save(obj, **kwargs) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf, **kwargs)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_save_and_load_on_the_device(zipfile):
    _check(torch.load(_save(_tensors(), _use_new_zipfile_serialization=zipfile)))


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("where", ["opencl", "opencl:0", "device", "dict", "callable"])
def test_cpu_checkpoints_load_onto_the_device(zipfile, where):
    cpu = {k: v.cpu() for k, v in _tensors().items()}
    cpu["row"], cpu["t"] = cpu["x"][1], cpu["x"].t()  # views, as in the device original
    map_location = {"opencl": "opencl", "opencl:0": "opencl:0", "device": torch.device(DEV, 0),
                    "dict": {"cpu": "opencl:0"},
                    "callable": lambda storage, location: storage.opencl()}[where]
    _check(torch.load(_save(cpu, _use_new_zipfile_serialization=zipfile),
                      map_location=map_location))


@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_device_checkpoints_load_onto_the_cpu(zipfile):
    _check(torch.load(_save(_tensors(), _use_new_zipfile_serialization=zipfile),
                      map_location="cpu"), device="cpu")


@pytest.mark.skipif(not TWO, reason="needs two opencl devices (POCL_DEVICES='pthread pthread')")
@pytest.mark.parametrize("zipfile", [True, False], ids=["zip", "legacy"])
def test_checkpoints_move_between_devices(zipfile):
    one = {k: v.to("opencl:1") for k, v in _tensors().items()}
    one["row"], one["t"] = one["x"][1], one["x"].t()
    buf = _save(one, _use_new_zipfile_serialization=zipfile)
    _check(torch.load(buf, map_location={"opencl:1": "opencl:0"}))
    buf.seek(0)
    _check(torch.load(buf), device="opencl:1")


def test_weights_only_and_mmap(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save(_tensors(), path)
    _check(torch.load(path, weights_only=True))
    cpu = {k: v.cpu() for k, v in _tensors().items()}
    cpu["row"], cpu["t"] = cpu["x"][1], cpu["x"].t()
    torch.save(cpu, path)
    _check(torch.load(path, mmap=True, map_location=DEV))


def test_pickle_of_tensors_and_storages():
    _check(pickle.loads(pickle.dumps(_tensors())), shares=False)
    x = torch.arange(5.0, device=DEV)
    # torch 2.13 cannot unpickle an UntypedStorage on any device (its legacy loader asks the
    # storage type for a dtype): the device raises what the CPU raises.
    for storage in (x.untyped_storage(), x.cpu().untyped_storage()):
        with pytest.raises(AttributeError, match="has no attribute 'dtype'"):
            pickle.loads(pickle.dumps(storage))
    typed = pickle.loads(pickle.dumps(x.storage()))
    assert typed.device == x.device and typed.dtype == torch.float32
    assert typed.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_deepcopy_keeps_views_and_autograd_leaves():
    _check(copy.deepcopy(_tensors()))
    p = torch.nn.Parameter(torch.ones(3, device=DEV))
    q = copy.deepcopy(p)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.device == p.device
    assert q.data_ptr() != p.data_ptr() and q.cpu().tolist() == [1.0, 1.0, 1.0]


def test_modules_round_trip_whole_and_by_state_dict():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model.to(DEV)
    x = torch.randn(5, 4, device=DEV)
    whole = torch.load(_save(model, _use_new_zipfile_serialization=False), weights_only=False)
    assert torch.equal(whole(x).cpu(), model(x).cpu())
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    fresh.load_state_dict(torch.load(_save(model.state_dict())))
    assert torch.equal(fresh(x.cpu()), model(x).cpu())


def test_safetensors_of_device_tensors(tmp_path):
    # safetensors saves device tensors (through .cpu()); its loader accepts only the device names
    # it knows ("device opencl is invalid"), so a model's weights come back on the CPU and move.
    from safetensors.torch import load_file, save_file

    tensors = {k: v.contiguous() for k, v in _tensors().items() if k in ("x", "i", "b")}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    loaded = {k: v.to(DEV) for k, v in load_file(str(path)).items()}
    for key, value in tensors.items():
        assert loaded[key].device == value.device and torch.equal(loaded[key].cpu(), value.cpu())


def test_dlpack_wrappers_copy_and_compute():
    x = torch.arange(6.0, device=DEV)
    y = torch.from_dlpack(torch.utils.dlpack.to_dlpack(x))
    assert y.data_ptr() == x.data_ptr()
    assert (y * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    y[0] = 7.0  # one memory
    assert x[0].item() == 7.0
    z = y.clone()
    z += 1
    assert x.cpu().tolist() == [7.0, 1.0, 2.0, 3.0, 4.0, 5.0]
