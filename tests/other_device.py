"""A second device for machines that have only a CPU, to catch device bugs in chapters.

On a GPU, a tensor built on the CPU (``torch.tensor([tokens])``) for a model on
``cuda:0`` stops the chapter with "tensor on cpu, weights on cuda:0"; on the CPU alone
nothing notices, since every tensor is on the same device. ``OtherDevice`` makes the CPU
play both parts. Tensors moved to ``torch.device("cpu", 0)`` ("the device") are marked
as living there; everything else is "the host". The computation is the CPU's own, so
every value is what the chapter computes anyway; what changes is what is allowed, as on
a real accelerator:

- an operation may not mix tensors of the device and the host (a 0-dimensional host
  tensor is allowed, as CUDA allows one; so are host index tensors in ``t[idx]``);
- ``.device`` of a device tensor says ``cpu:0``, so ``device=x.device`` and
  ``.to(x.device)`` put new tensors there, and the library's own device checks fire;
- printing a device tensor, or turning it into a NumPy array, raises (on a GPU the first
  prints ``device='cuda:0'`` into the stored output, the second fails): printed values
  must be brought to the host with ``.cpu()`` first, as the book's rules say.

``tl.get_device()`` returns the device while ``install()`` is in force, so a chapter that
puts its model on ``tl.get_device()`` runs as on a GPU machine. Used by
``tests/test_chapter_devices.py``, in-process and, through an IPython startup file, in
the kernels that nbval starts.
"""
from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

DEVICE = torch.device("cpu", 0)
_MARK = "_tt_on_other_device"
_ATTRIBUTES = torch._C.TensorBase.__dict__  # .device and .data are C-level attributes
_MOVES = {torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.type_as}
# Operations that copy between devices, or read host indices, on a real accelerator too.
_CROSS_DEVICE = {torch.Tensor.copy_, torch.Tensor.__setitem__}
_HOST_ONLY = {torch.Tensor.__repr__, torch.Tensor.__str__, torch.Tensor.numpy,
              torch.Tensor.__array__}


class DeviceMismatch(RuntimeError):
    """Raised where a real accelerator would refuse an operation."""


def on_device(x) -> bool:
    return isinstance(x, torch.Tensor) and getattr(x, _MARK, False)


def _mark(x, value: bool) -> None:
    if isinstance(x, torch.Tensor):
        setattr(x, _MARK, value)


def _is_device(where) -> bool | None:
    """True for the device, False for the host, None if ``where`` names no device."""
    if isinstance(where, torch.Tensor):
        return on_device(where)
    if isinstance(where, (str, torch.device)):
        try:
            return torch.device(where) == DEVICE
        except (RuntimeError, TypeError):  # a dtype name such as "float32"
            return None
    return None


def _tensors(args, kwargs):
    """The tensors among the arguments, one level into lists and tuples (torch.cat)."""
    found = []
    for value in list(args) + list(kwargs.values()):
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(v for v in value if isinstance(v, torch.Tensor))
    return found


def _accessor(func, attribute: str, kind: str) -> bool:
    """Whether ``func`` reads (``kind="__get__"``) or sets a tensor's ``attribute``."""
    return (getattr(func, "__name__", "") == kind
            and getattr(func, "__self__", None) is _ATTRIBUTES[attribute])


def _internal(func) -> bool:
    """PyTorch's own helpers (``torch._has_compatible_shallow_copy_type``, used by
    ``Module.to``) compare tensors of two devices on purpose."""
    name = getattr(func, "__name__", "")
    return name.startswith("_") and not name.startswith("__")


def _name(func) -> str:
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


class OtherDevice(TorchFunctionMode):
    """The mode that enforces the rules above (see the module docstring). ``results``
    counts the tensors it made on the device: a run in which it stays 0 tested nothing."""

    results = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if _accessor(func, "device", "__get__"):
            return DEVICE if on_device(args[0]) else func(*args)
        if func in _HOST_ONLY and on_device(args[0]):
            raise DeviceMismatch(
                f"{_name(func)} of a tensor on the model's device: on a GPU it "
                "prints device='cuda:0' or fails; call .cpu() first")
        if _accessor(func, "data", "__set__"):  # how Module.to(device) moves a parameter
            func(*args)
            _mark(args[0], on_device(args[1]))
            return None
        checked = args[:1] if func is torch.Tensor.__getitem__ else args
        if func not in _CROSS_DEVICE and func not in _MOVES and not _internal(func):
            tensors = _tensors(checked, kwargs)
            here = [t for t in tensors if on_device(t)]
            host = [t for t in tensors if not on_device(t) and t.dim() > 0]
            if here and host:
                shapes = [tuple(t.shape) for t in host]
                raise DeviceMismatch(
                    f"{_name(func)} got tensors on the model's device ({DEVICE}) and on "
                    f"the CPU (shapes {shapes}): build them with device= or .to(...)")
        out = func(*args, **kwargs)
        where = self._destination(func, args, kwargs)
        if where is None:
            where = any(on_device(t) for t in _tensors(args, kwargs))
        results = out if isinstance(out, (list, tuple)) else [out]
        for i, result in enumerate(results):
            if (isinstance(result, torch.Tensor) and on_device(result) != where
                    and any(result is a for a in args)):
                # .cpu() or .to() of a tensor already there returns the tensor itself; a real
                # move makes a new one, and the old one stays where it was.
                result = result.view_as(result)
                if not isinstance(out, (list, tuple)):
                    out = result
            _mark(result, where)
            self.results += where and isinstance(result, torch.Tensor)
        return out

    @staticmethod
    def _destination(func, args, kwargs):
        """Where the result lives: True (the device), False (the host), None (as its inputs)."""
        if func is torch.Tensor.cpu:
            return False
        if func in _MOVES:
            for value in list(args[1:]) + [kwargs.get("device"), kwargs.get("other")]:
                where = _is_device(value)
                if where is not None:
                    return where
            return None
        if kwargs.get("device") is not None:
            return bool(_is_device(kwargs["device"]))
        return None


def install(report: str | None = None) -> OtherDevice:
    """Enter the mode for good (in a notebook kernel: for every later cell) and make
    ``tl.get_device()`` return the device. With ``report``, the number of tensors made on
    the device is written to that file after every notebook cell (a kernel may be stopped
    without running exit handlers)."""
    from IPython import get_ipython

    import transformer_lib
    import transformer_lib.examples.number_words as number_words
    import transformer_lib.utils as utils

    def get_device():
        return DEVICE

    for module in (transformer_lib, utils, number_words):
        if hasattr(module, "get_device"):
            module.get_device = get_device
    mode = OtherDevice()
    mode.__enter__()
    if report is not None:
        def write_report(*_):
            with open(report, "w") as f:
                f.write(str(mode.results))

        get_ipython().events.register("post_run_cell", write_report)
    return mode
