#include "stalepipe/models/skips.h"

#include <set>

#include "stalepipe/common/error.h"

namespace stalepipe::models {

bool is_reserved_skip_name(const std::string& name) {
  return name == "activation" || name == "target" || name == "gradient";
}

torch::Tensor forward_unit(torch::nn::AnyModule& module, const std::string& unit_name,
                           const Skips& skips, torch::Tensor x, SkipTable& table) {
  if (skips.empty()) return module.forward(std::move(x));
  std::vector<torch::Tensor> in;
  in.reserve(1 + skips.pops.size());
  in.push_back(std::move(x));
  for (const std::string& name : skips.pops) {
    auto it = table.find(name);
    SP_CHECK_ARG(it != table.end(), "unit ", unit_name, " pops '", name, "', which is not stashed");
    in.push_back(std::move(it->second));
    table.erase(it);
  }
  std::vector<torch::Tensor> out = module.forward<std::vector<torch::Tensor>>(std::move(in));
  SP_CHECK_ARG(out.size() == 1 + skips.stashes.size(), "unit ", unit_name, " returned ", out.size(),
               " tensors; it stashes ", skips.stashes.size(), " so it must return ",
               1 + skips.stashes.size(), " (its output, then the stashed ones)");
  for (size_t i = 0; i < skips.stashes.size(); ++i) table[skips.stashes[i]] = std::move(out[i + 1]);
  return std::move(out[0]);
}

namespace {

std::string unit_text(const std::vector<Unit>& units, size_t i) {
  return c10::str("unit ", i + 1, " (", units[i].name, ")");
}

void check_names(const std::string& where, const std::vector<std::string>& names, const char* what) {
  std::set<std::string> seen;
  for (const std::string& name : names) {
    SP_CHECK_ARG(!name.empty(), where, " ", what, " a skip with an empty name");
    SP_CHECK_ARG(!is_reserved_skip_name(name), where, " ", what, " '", name,
                 "', a name the engine's messages use; choose another");
    SP_CHECK_ARG(seen.insert(name).second, where, " ", what, " '", name, "' twice");
  }
}

}  // namespace

void check_skips(const std::string& model, const std::vector<Unit>& units) {
  std::map<std::string, size_t> stashed_by, popped_by;
  for (size_t i = 0; i < units.size(); ++i) {
    const Skips& s = units[i].skips;
    const std::string where = c10::str("model ", model, ": ", unit_text(units, i));
    check_names(where, s.pops, "pops");
    check_names(where, s.stashes, "stashes");
    for (const std::string& name : s.pops) {
      const auto stash = stashed_by.find(name);
      if (stash == stashed_by.end()) {
        for (size_t later = i; later < units.size(); ++later) {
          for (const std::string& n : units[later].skips.stashes) {
            SP_CHECK_ARG(n != name, where, " pops '", name, "', which ", unit_text(units, later),
                         " stashes ", later == i ? "itself" : "after it", "; a skip must go forward");
          }
        }
        throw UsageError(c10::str(where, " pops '", name, "', which no unit stashes"));
      }
      const auto pop = popped_by.find(name);
      SP_CHECK_ARG(pop == popped_by.end(), where, " pops '", name, "', which ",
                   unit_text(units, pop->second), " popped already; stash it under two names");
      popped_by[name] = i;
    }
    for (const std::string& name : s.stashes) {
      const auto stash = stashed_by.find(name);
      SP_CHECK_ARG(stash == stashed_by.end(), where, " stashes '", name, "', which ",
                   unit_text(units, stash->second), " stashes already");
      stashed_by[name] = i;
    }
  }
  for (const auto& [name, i] : stashed_by) {
    SP_CHECK_ARG(popped_by.count(name), "model ", model, ": ", unit_text(units, i), " stashes '",
                 name, "', which no later unit pops");
  }
}

OpenSkips open_skips(const std::vector<Skips>& units) {
  OpenSkips open;
  std::set<std::string> stashed;  // by these units and not yet popped by them
  for (const Skips& unit : units) {
    for (const std::string& name : unit.pops) {
      if (!stashed.erase(name)) open.in.push_back(name);
    }
    for (const std::string& name : unit.stashes) stashed.insert(name);
  }
  for (const Skips& unit : units) {
    for (const std::string& name : unit.stashes) {
      if (stashed.count(name)) open.out.push_back(name);
    }
  }
  return open;
}

bool skip_live_after(const std::vector<Unit>& units, size_t u) {
  std::vector<Skips> first;
  for (size_t i = 0; i <= u && i < units.size(); ++i) first.push_back(units[i].skips);
  return !open_skips(first).out.empty();
}

torch::Tensor forward_units(const std::vector<Unit>& units, size_t first, size_t last,
                            torch::Tensor x, SkipTable& table) {
  for (size_t u = first; u < last; ++u) {
    torch::nn::AnyModule module = units[u].module;  // a shallow copy: forward() is not const
    x = forward_unit(module, units[u].name, units[u].skips, std::move(x), table);
  }
  return x;
}

}  // namespace stalepipe::models
