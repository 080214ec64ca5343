"""stalepipe: train a CNN as a pipeline with stale weights, from Python.

    import torch, torchvision, stalepipe
    net = torchvision.models.resnet18(num_classes=10)
    trainer = stalepipe.Trainer(net, data="folder:photos", image_size=64, pipeline=[8], epochs=5, lr=0.05, out="runs/r18")
    history = trainer.fit()
    net.load_state_dict(trainer.state_dict())

The engine is stalepipe's C++ library (the one `stalepipe train` runs); docs/python.md.
"""
import re as _re

import torch as _torch

from . import _build


def _minor(version):
    match = _re.match(r"(\d+)\.(\d+)", version)
    return match.groups() if match else version


if _minor(_torch.__version__) != _minor(_build.TORCH_VERSION):
    raise ImportError(
        f"stalepipe was built against LibTorch {_build.TORCH_VERSION}, but this Python imports torch "
        f"{_torch.__version__} ({_torch.__file__}); rebuild stalepipe with this torch, or run the Python that has "
        f"torch {_build.TORCH_VERSION}")

from ._core import DivergedError, Error  # noqa: E402
from .trainer import Trainer, options  # noqa: E402

__version__ = _build.VERSION
__all__ = ["Trainer", "Error", "DivergedError", "options", "__version__"]
