"""stalepipe.Trainer: a torch.nn.Module in, the trained network out, stalepipe's engine underneath."""
import difflib
import json
import numbers
import os
import tempfile
import warnings

import torch

from . import _core

_OPTIONS = {row["keyword"]: row for row in _core.option_table()}
# The network is the module given; these choose one of stalepipe's own instead.
_MODEL_KEYWORDS = ("model", "model_file", "dropout")


def options():
    """Every option keyword with its default and help: {keyword: (default, help)}."""
    return {k: (row["default"], row["help"]) for k, row in _OPTIONS.items()}


def _type_text(value):
    return f"{type(value).__name__} {value!r}"


def _checked(keyword, value):
    """The value as the option table holds it; TypeError naming the keyword for another type."""
    row = _OPTIONS[keyword]
    default = row["default"]
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if row["text"]:
        # A PPV, an enum's name, devices, a training point, a loss: their CLI text; a list is
        # its comma-separated form (pipeline=[7, 13, 19]).
        if isinstance(value, (list, tuple)) and all(isinstance(v, (numbers.Integral, str)) for v in value):
            return ",".join(str(v) for v in value)
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str):
            return value
        raise TypeError(f"{keyword}: expects text as the CLI takes it (default {default!r}), got {_type_text(value)}")
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        raise TypeError(f"{keyword}: expects True or False, got {_type_text(value)}")
    if isinstance(default, int):
        if isinstance(value, numbers.Integral) and not isinstance(value, bool):
            return int(value)
        raise TypeError(f"{keyword}: expects an int, got {_type_text(value)}")
    if isinstance(default, float):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            return float(value)
        raise TypeError(f"{keyword}: expects a number, got {_type_text(value)}")
    if isinstance(default, str):
        if isinstance(value, str):
            return value
        raise TypeError(f"{keyword}: expects a str, got {_type_text(value)}")
    if isinstance(default, list):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            value = [value]
        if isinstance(value, (list, tuple)) and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
            return list(value)
        raise TypeError(f"{keyword}: expects a list of numbers, got {_type_text(value)}")
    return value


def _checked_options(given):
    for keyword in given:
        if keyword in _MODEL_KEYWORDS:
            raise TypeError(f"{keyword}: the module given to Trainer is the network; --{keyword.replace('_', '-')} "
                            f"chooses or shapes a network of the CLI's own")
        if keyword not in _OPTIONS:
            close = difflib.get_close_matches(keyword, list(_OPTIONS), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else "; stalepipe.options() lists them"
            raise TypeError(f"Trainer got an unexpected keyword argument '{keyword}'{hint}")
    checked = {k: _checked(k, v) for k, v in given.items()}
    if checked.get("executor") == "processes":
        raise ValueError("executor processes: each partition is a process of its own, which a Python call does not "
                         "start; run `stalepipe launch --nproc K -- train --model-file FILE --executor processes` (docs/python.md)")
    return checked


def _scripted(module):
    if isinstance(module, torch.jit.ScriptModule):
        return module
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"Trainer takes a torch.nn.Module or a torch.jit.ScriptModule, got {type(module).__name__}")
    try:
        return torch.jit.script(module)
    except Exception as e:  # TorchScript's errors are of several types; all mean the same here
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        raise ValueError(f"{type(module).__name__} cannot be scripted by torch.jit.script: "
                         f"{lines[0] if lines else type(e).__name__}") from None


def _data_kind(data, role):
    """("dataset" | "iterable", data, name): a map-style Dataset or an iterable of batches."""
    if isinstance(data, torch.utils.data.Dataset) and not isinstance(data, torch.utils.data.IterableDataset):
        return ("dataset", data, type(data).__name__)
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        raise TypeError(f"{role}: expects a map-style torch.utils.data.Dataset of (tensor, target) or an iterable of "
                        f"(x, y) batches such as a DataLoader, got {type(data).__name__} (a data set named by a "
                        f"string is the keyword data=)")
    return ("iterable", data, type(data).__name__)


def _sample_shape(kind):
    """[C, H, W] of one sample: the Dataset's first item, or the first batch's x."""
    what, data, name = kind
    if what == "dataset":
        item = data[0]
        x = item[0] if isinstance(item, (tuple, list)) and len(item) == 2 else None
        where = f"{name} item 0"
    else:
        inner = getattr(data, "dataset", None)
        if isinstance(inner, torch.utils.data.Dataset) and not isinstance(inner, torch.utils.data.IterableDataset):
            return _sample_shape(("dataset", inner, name))
        batch = next(iter(data), None)
        x = batch[0][0] if isinstance(batch, (tuple, list)) and len(batch) == 2 and torch.is_tensor(batch[0]) \
            and batch[0].dim() >= 1 else None
        where = f"{name} batch 0"
    if not torch.is_tensor(x) or x.dim() != 3:
        shape = f"x of shape {list(x.shape)}" if torch.is_tensor(x) else f"{type(x).__name__}"
        raise ValueError(f"{where}: expected (x, y) with x a tensor [C, H, W] per sample, got {shape}")
    return tuple(x.shape)


def _output_width(script, shape):
    """The network's output width for two samples of `shape` (eval mode, no gradients)."""
    training = script.training
    script.eval()
    try:
        with torch.no_grad():
            out = script(torch.zeros(2, *shape))
    except Exception as e:
        raise ValueError(f"the network cannot take a batch of samples of shape {list(shape)}: "
                         f"{str(e).strip().splitlines()[0]}") from None
    finally:
        script.train(training)
    if not torch.is_tensor(out) or out.dim() < 2:
        raise ValueError(f"the network must return logits [N, classes] (or [N, classes, H, W]), got "
                         f"{type(out).__name__ if not torch.is_tensor(out) else list(out.shape)}")
    return out.shape[1]


class Trainer:
    def __init__(self, module=None, *, resume=None, export=None, **options):
        self._resume = os.fspath(resume) if resume is not None else ""
        self._export = os.fspath(export) if export is not None else ""
        if self._resume:
            if module is not None or options:
                given = ", ".join((["a module"] if module is not None else []) + sorted(options))
                raise ValueError(f"resume={self._resume}: the run continues with its own network and options "
                                 f"(its config.json); give none beside it (got {given})")
            if not os.path.isfile(os.path.join(self._resume, "config.json")):
                raise ValueError(f"resume={self._resume}: no config.json there; not a stalepipe run directory")
            self._script = None
            self._options = {}
        else:
            if module is None:
                raise TypeError("Trainer needs a module (torch.nn.Module or ScriptModule), or resume=DIR")
            self._options = _checked_options(options)
            self._script = _scripted(module)
        if self._export:
            _core.check_writable(self._export, "export")
        self._trained = None
        self._stopped_at = None
        self._fitted = False
        self.history = []

    def fit(self, data=None, *, test=None, on_step=None, on_epoch=None, on_eval=None, on_warning=None):
        """Trains; returns the history, a list of one dict per epoch (pandas.DataFrame(history))."""
        if self._fitted:
            raise RuntimeError("fit() has run: a Trainer trains its run once; Trainer(resume=DIR).fit() continues a "
                               "stopped run, and a new Trainer starts another")
        if data is None and test is not None:
            raise ValueError("test= evaluates on data held in Python; give the training data too (fit(data, test=...))")
        if data is not None and "data" in self._options:
            raise ValueError(f"fit(data) trains on data held in Python; data={self._options['data']!r} names a data "
                             f"set too; give one of them")
        train_kind = _data_kind(data, "fit(data)") if data is not None else None
        test_kind = _data_kind(test, "fit(test=)") if test is not None else None
        hooks = {"on_step": on_step, "on_eval": on_eval, "on_epoch": on_epoch,
                 "on_warning": on_warning if on_warning is not None else _warn}
        with tempfile.TemporaryDirectory(prefix="stalepipe-") as scratch:
            options = dict(self._options)
            input_shape = (0, 0, 0, 0)
            if not self._resume:
                options["model_file"] = self._save_script(scratch)
            if train_kind is not None:
                shape = _sample_shape(train_kind)
                input_shape = (*shape, _output_width(self._network(), shape))
            trained = self._export or os.path.join(scratch, "trained.pt")
            try:
                result = _core.run(options, self._resume, train_kind, test_kind, input_shape, hooks, trained)
            except (ValueError, TypeError):
                raise  # refused before training: the call may be made again with the fault fixed
            except BaseException:
                self._fitted = True
                raise
            self._fitted = True
            self.history.extend(result["epochs"])
            self._stopped_at = result["steps"] if result["interrupted"] else None
            if not result["interrupted"]:
                self._trained = torch.jit.load(trained)
        return result["epochs"]

    def _network(self):
        """The network as scripted, or as the run being resumed recorded it."""
        if self._script is None:
            with open(os.path.join(self._resume, "config.json")) as f:
                recorded = json.load(f).get("model_file_path")
            if not recorded:
                raise ValueError(f"resume={self._resume}: the run trained a network of the CLI's (no model file)")
            self._script = torch.jit.load(recorded)
        return self._script

    def _save_script(self, scratch):
        """The network as the run's model file: out/model.pt (resume= finds it there), else a scratch file."""
        out = self._options.get("out", "")
        if not out:
            path = os.path.join(scratch, "model.pt")
        else:
            for held in ("config.json", "checkpoint"):
                if os.path.exists(os.path.join(out, held)):
                    raise ValueError(f"out {out}: already holds a run; resume it (Trainer(resume={out!r})) "
                                     f"or choose another directory")
            os.makedirs(out, exist_ok=True)
            path = os.path.join(out, "model.pt")
        self._script.save(path)
        return os.path.abspath(path)

    def module(self):
        """The trained network, a torch.jit.ScriptModule with the trained weights."""
        if self._trained is None:
            if self._stopped_at is not None:
                raise RuntimeError(f"the run stopped at step {self._stopped_at} before its end; "
                                   f"resume it (Trainer(resume=DIR).fit()) to train the rest")
            raise RuntimeError("nothing trained yet; call fit() first")
        return self._trained

    def state_dict(self):
        """The trained weights and buffers, under the names of the module given (load_state_dict takes them)."""
        return self.module().state_dict()


def _warn(message):
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def _options_doc():
    lines = []
    for keyword, row in _OPTIONS.items():
        lines.append(f"    {keyword} (default {row['default']!r}): {row['help']}")
    return "\n".join(lines)


Trainer.__doc__ = f"""Trains a network as a pipeline with stale weights on stalepipe's engine.

Trainer(module, **options) scripts the module (torch.jit.script; a ScriptModule is taken as it
is) and cuts it into partitions as `stalepipe train --model-file` does. fit() trains it on the
data set named by data= (the default, Fashion-MNIST), or on fit(dataset_or_dataloader);
state_dict() and module() give the trained network. Trainer(resume=DIR) continues the run in DIR
from its last checkpoint; export=FILE writes the trained network as TorchScript.

Options (each the CLI's flag with '_' for '-'):
{_options_doc()}
"""
