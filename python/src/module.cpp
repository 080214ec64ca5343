// stalepipe._core: the library's training run (train/trainer.h) for stalepipe.Trainer
// (python/stalepipe/trainer.py), and the option table its keywords come from. Keywords are
// the CLI's flags with '_' for '-' (--image-size: image_size); messages name them so.
#include <cstdio>

#include <torch/csrc/utils/pybind.h>
#include <torch/version.h>

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "python_batches.h"
#include "python_errors.h"
#include "stalepipe/api/option_fields.h"
#include "stalepipe/common/files.h"
#include "stalepipe/common/malloc_tuning.h"
#include "stalepipe/models/torchscript.h"
#include "stalepipe/stalepipe.h"
#include "stalepipe/train/run_data.h"
#include "stalepipe/train/stop_signals.h"
#include "stalepipe/train/trainer.h"

namespace stalepipe::python {
namespace {

// "image_size" for --image-size; "" for a field without a flag (not offered in Python either).
std::string keyword_of(const OptionField& f) {
  if (f.flag.empty()) return "";
  std::string keyword = f.flag.substr(2);
  std::replace(keyword.begin(), keyword.end(), '-', '_');
  return keyword;
}

// `message` with each field named by its keyword.
std::string with_keywords(const std::string& message) {
  return rename_fields(message, [](const std::string& part, const std::string& name) {
    for (const OptionField& f : option_fields()) {
      if (f.part == part && f.name == name && !f.flag.empty()) return keyword_of(f);
    }
    return part + "::" + name;
  });
}

py::object to_python(const nlohmann::json& value) { return py::module_::import("json").attr("loads")(value.dump()); }

nlohmann::json to_json(const py::handle& value) {
  return nlohmann::json::parse(std::string(py::str(py::module_::import("json").attr("dumps")(value))));
}

// The option table: keyword, field, default (as config.json holds it), help, stored as text.
py::list option_table() {
  py::list table;
  const Options defaults;
  for (const OptionField& f : option_fields()) {
    if (f.flag.empty()) continue;
    py::dict row;
    row["keyword"] = keyword_of(f);
    row["field"] = f.qualified();
    row["default"] = to_python(f.write(defaults));
    row["help"] = with_keywords(f.help);
    row["text"] = f.text;
    table.append(row);
  }
  return table;
}

// The options the keywords give, over the defaults. UsageError (ValueError) for a bad value.
Options options_of(const py::dict& keywords) {
  Options options;
  for (const auto& [key, value] : keywords) {
    const std::string keyword = py::str(key);
    const OptionField* field = nullptr;
    for (const OptionField& f : option_fields()) {
      if (keyword_of(f) == keyword && !keyword.empty()) field = &f;
    }
    if (!field) throw py::type_error(c10::str("unexpected keyword argument '", keyword, "'"));
    field->read(to_json(value), options, keyword);
  }
  return options;
}

py::object optional_number(const std::optional<double>& value) { return value ? py::cast(*value) : py::none(); }

py::dict epoch_dict(const EpochSummary& m) {
  py::dict d;
  d["epoch"] = m.epoch;
  d["step"] = m.end_step;
  d["lr"] = m.lr;
  d["train_loss"] = m.train_loss;
  d["train_accuracy"] = optional_number(m.train_accuracy);
  d["test_loss"] = m.evaluated ? py::cast(m.test_loss) : py::none();
  d["test_accuracy"] = m.evaluated ? optional_number(m.test_accuracy) : py::none();
  d["images_per_second"] = m.images_per_second;
  d["wall_seconds"] = m.wall_seconds;
  d["samples"] = m.samples;
  return d;
}

py::dict eval_dict(const EvalPoint& p) {
  py::dict d;
  d["step"] = p.step;
  d["epoch"] = p.epoch;
  d["wall_seconds"] = p.wall_seconds;
  d["epoch_end"] = p.epoch_end;
  d["test_loss"] = p.result.loss;
  d["test_accuracy"] = optional_number(p.result.accuracy);
  d["samples"] = p.result.samples;
  return d;
}

py::dict step_dict(const StepLoss& l) {
  py::dict d;
  d["step"] = l.step;
  d["loss"] = l.loss;
  d["samples"] = l.samples;
  return d;
}

py::dict result_dict(const train::TrainResult& r) {
  py::list epochs, evaluations;
  for (const auto& m : r.epochs) epochs.append(epoch_dict(m));
  for (const auto& p : r.evaluations) evaluations.append(eval_dict(p));
  py::dict d;
  d["epochs"] = epochs;
  d["evaluations"] = evaluations;
  d["steps"] = r.steps;
  d["interrupted"] = r.interrupted;
  d["test_accuracy"] = optional_number(r.test_accuracy);
  d["test_loss"] = r.test_loss;
  d["train_loss"] = r.train_loss;
  d["images_per_second"] = r.images_per_second;
  d["wall_seconds"] = r.wall_seconds;
  d["partitions"] = r.info.units.size();
  return d;
}

// A Python callable as a hook, called with the GIL; its exception stops the run (PythonErrors).
template <typename T>
std::function<void(const T&)> hook(const py::object& f, const char* name, py::dict (*convert)(const T&),
                                   PythonErrors& errors) {
  if (f.is_none()) return {};
  return [f, name, convert, &errors](const T& value) { errors.call(name, [&] { f(convert(value)); }); };
}

// The data the caller gives: ("dataset" | "iterable", object, name) for training and for
// evaluation (or None), and one sample's shape with the network's output width.
std::unique_ptr<train::CallerData> caller_data(const py::object& data, const py::object& test,
                                               const py::tuple& input, const Options& o, PythonErrors& errors) {
  if (data.is_none()) return nullptr;
  const auto source = [&](const py::object& spec, bool training) -> std::pair<std::unique_ptr<BatchSource>, int64_t> {
    if (spec.is_none()) return {nullptr, -1};
    const auto kind = spec[py::int_(0)].cast<std::string>();
    const auto name = spec[py::int_(2)].cast<std::string>();
    if (kind == "iterable") return {std::make_unique<IterableBatches>(spec[py::int_(1)], name, errors), -1};
    DatasetBatches::Options d;
    d.batch_size = o.data().batch_size();
    d.shuffle = training;
    d.drop_last = training && o.data().drop_last();
    d.seed = o.run().seed();
    d.threads = train::resolved_data_threads(o);
    auto batches = std::make_unique<DatasetBatches>(spec[py::int_(1)], name, d, errors);
    const int64_t samples = batches->samples();
    return {std::move(batches), samples};
  };
  auto c = std::make_unique<train::CallerData>();
  c->name = c10::str("python:", data[py::int_(2)].cast<std::string>());
  std::tie(c->train, c->train_samples) = source(data, true);
  std::tie(c->test, c->test_samples) = source(test, false);
  c->input.channels = input[0].cast<int64_t>();
  c->input.height = input[1].cast<int64_t>();
  c->input.width = input[2].cast<int64_t>();
  c->input.num_classes = input[3].cast<int64_t>();
  return c;
}

// One training run (or the rest of one: resume), its result as a dict.
py::dict run(const py::dict& keywords, const std::string& resume, const py::object& data, const py::object& test,
             const py::tuple& input, const py::dict& hooks, const std::string& trained_file) {
  PythonErrors errors;
  const Options options = resume.empty() ? options_of(keywords) : train::read_run_config(resume);
  std::unique_ptr<train::CallerData> caller = caller_data(data, test, input, options, errors);
  train::TrainHooks h;
  h.on_step = hook<StepLoss>(hooks["on_step"], "on_step", step_dict, errors);
  h.on_eval = hook<EvalPoint>(hooks["on_eval"], "on_eval", eval_dict, errors);
  h.on_epoch = hook<EpochSummary>(hooks["on_epoch"], "on_epoch", epoch_dict, errors);
  h.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", with_keywords(line).c_str()); };
  if (const py::object warn = hooks["on_warning"]; !warn.is_none()) {
    h.on_warning = [warn, &errors](const std::string& line) {
      errors.call("on_warning", [&] { warn(with_keywords(line)); });
    };
  }
  if (!trained_file.empty()) {
    h.on_trained = [&trained_file](const PipelineTrainer& t) { models::save_torchscript(t.model(), trained_file); };
  }
  train::TrainResult result;
  std::exception_ptr failure;
  {
    // The interpreter's own Ctrl-C handler cannot run while this thread is in C++; its handlers
    // are back afterwards. SIGTERM stays Python's.
    const train::StopSignals signals(/*sigterm_too=*/false);
    h.stop = &signals.stop();
    h.suspended_ns = &signals.suspended_ns();
    py::gil_scoped_release released;
    try {
      result = resume.empty() ? train::train(options, h, caller.get()) : train::resume(resume, h, {}, caller.get());
    } catch (...) {
      failure = std::current_exception();
    }
    caller.reset();  // joins its readers, which take the GIL to let go of the Python objects
  }
  errors.raise_if_any();  // a hook's or the data's own exception, rather than the line it became
  if (failure) std::rethrow_exception(failure);
  if (train::StopSignals::stop().load() && result.interrupted) {
    PyErr_SetNone(PyExc_KeyboardInterrupt);  // after the drain and the checkpoint
    throw py::error_already_set();
  }
  return result_dict(result);
}

}  // namespace
}  // namespace stalepipe::python

PYBIND11_MODULE(_core, m) {
  using namespace stalepipe;
  using namespace stalepipe::python;
  m.doc() = "stalepipe's engine; use stalepipe.Trainer";
  // As the CLI does first thing: a training step reuses the memory the last one freed instead
  // of returning it to the system and faulting it in again (common/malloc_tuning.h).
  keep_freed_memory();
  m.attr("version") = c10::str(STALEPIPE_VERSION_MAJOR, ".", STALEPIPE_VERSION_MINOR, ".", STALEPIPE_VERSION_PATCH);
  m.attr("torch_version") = TORCH_VERSION;  // the LibTorch it was built against
  static py::exception<RuntimeError> error(m, "Error", PyExc_RuntimeError);
  static py::exception<DivergedError> diverged(m, "DivergedError", error.ptr());
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const UsageError& e) {
      PyErr_SetString(PyExc_ValueError, with_keywords(e.what()).c_str());
    } catch (const DivergedError& e) {  // PyErr_SetString: pybind11 2.10 and 2.13 alike
      PyErr_SetString(diverged.ptr(), with_keywords(e.what()).c_str());
    } catch (const RuntimeError& e) {
      PyErr_SetString(error.ptr(), with_keywords(e.what()).c_str());
    } catch (const c10::Error& e) {
      PyErr_SetString(error.ptr(), e.what_without_backtrace());
    }
  });
  m.def("option_table", &option_table, "Every option: keyword, field, default, help, text");
  m.def("run", &run, py::arg("options"), py::arg("resume"), py::arg("data"), py::arg("test"), py::arg("input"),
        py::arg("hooks"), py::arg("trained_file"));
  m.def("check_writable", &check_writable, py::arg("file"), py::arg("what"),
        "ValueError unless `file` can be written (checked before a run that ends by writing it)");
}
