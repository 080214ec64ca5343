// Python code that the library calls back (hooks, a Dataset, a DataLoader) runs on the
// library's threads. An exception it raises stops the run there as a one-line RuntimeError,
// and is kept to be raised again, itself, in the caller's thread once the run has stopped.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <c10/util/StringUtil.h>
#include <pybind11/pybind11.h>

#include "stalepipe/common/error.h"

namespace stalepipe::python {

namespace py = pybind11;

class PythonErrors {
 public:
  // Calls f with the GIL held. If it raises, keeps the first such exception with `where` (e.g.
  // "DataLoader batch 3") and throws RuntimeError "where: Type: message" for the loop.
  template <typename F>
  auto call(const std::string& where, F&& f) -> decltype(f()) {
    py::gil_scoped_acquire gil;
    try {
      return f();
    } catch (py::error_already_set& e) {
      const std::string text = c10::str(where, ": ", one_line(e.value()));
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_) {
        first_.emplace(std::move(e));
        where_ = where;
      }
      throw RuntimeError(text);
    }
  }

  // Raises the kept exception, if any, with a note naming where it arose. Needs the GIL.
  void raise_if_any() {
    std::optional<py::error_already_set> error;
    std::string where;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error.swap(first_);
      where = where_;
    }
    if (!error) return;
    py::object value = error->value();
    if (py::hasattr(value, "add_note")) value.attr("add_note")(c10::str("(raised in ", where, ", while stalepipe trained)"));
    error->restore();
    throw py::error_already_set();
  }

 private:
  // "ValueError: message" (its first line). Needs the GIL.
  static std::string one_line(const py::object& value) {
    std::string message = py::str(value);
    message = message.substr(0, message.find('\n'));
    const std::string type = py::str(py::type::handle_of(value).attr("__name__"));
    return message.empty() ? type : type + ": " + message;
  }

  std::mutex mutex_;
  std::optional<py::error_already_set> first_;
  std::string where_;
};

}  // namespace stalepipe::python
