// Where a process sits in the group: the options, completed from torchrun's environment.
#include <cstdlib>

#include "stalepipe/common/error.h"
#include "stalepipe/exec/processes.h"

namespace stalepipe::exec {
namespace {

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (!value || !*value) return fallback;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  SP_CHECK_ARG(end && *end == '\0' && parsed >= 0 && parsed <= 1 << 20, "$", name, "=", value,
               ": expected a non-negative integer");
  return static_cast<int>(parsed);
}

}  // namespace

ProcessGroupOptions ProcessGroupOptions::resolved() const {
  ProcessGroupOptions o = *this;
  if (o.rank() < 0) o.rank(env_int("RANK", -1));
  if (o.world_size() < 0) o.world_size(env_int("WORLD_SIZE", -1));
  if (o.master_addr().empty()) {
    const char* addr = std::getenv("MASTER_ADDR");
    o.master_addr(addr && *addr ? addr : "127.0.0.1");
  }
  if (o.master_port() < 0) o.master_port(env_int("MASTER_PORT", 29500));
  SP_CHECK_ARG(o.world_size() >= 1, "ProcessGroupOptions::world_size is not set: set WORLD_SIZE "
               "(or the option), or start the ranks with stalepipe's launcher");
  SP_CHECK_ARG(o.rank() >= 0 && o.rank() < o.world_size(), "ProcessGroupOptions::rank ",
               o.rank(), " is outside 0..", o.world_size() - 1,
               "; set RANK (or the option) for every process");
  SP_CHECK_ARG(o.master_port() >= 1 && o.master_port() <= 65535, "ProcessGroupOptions::master_port ", o.master_port(),
               " is not a TCP port (1..65535)");
  SP_CHECK_ARG(o.timeout_seconds() >= 1, "ProcessGroupOptions::timeout_seconds must be >= 1, got ",
               o.timeout_seconds());
  return o;
}

}  // namespace stalepipe::exec
