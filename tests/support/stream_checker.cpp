#include "support/stream_checker.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/Storage.h>
#include <c10/util/StringUtil.h>

#include "exec/cpu_streams_impl.h"
#include "stalepipe/common/error.h"

namespace stalepipe::test {
namespace {

// Per stream: the number of that stream's operations known to be done (a vector clock).
using Clock = std::vector<uint64_t>;

void join(Clock& into, const Clock& other) {
  if (into.size() < other.size()) into.resize(other.size(), 0);
  for (size_t i = 0; i < other.size(); ++i) into[i] = std::max(into[i], other[i]);
}

uint64_t at(const Clock& clock, size_t stream) { return stream < clock.size() ? clock[stream] : 0; }

// What an operation writes, from its schema: arguments annotated (a!), returns that are fresh
// tensors or written aliases (a view's return is not a write).
struct Access {
  bool known = false;
  bool view = false;  // returns views and writes nothing: touches no data
  std::vector<bool> writes_argument;
  std::vector<bool> writes_return;
  std::vector<bool> fresh_return;  // a new tensor, made by the operation (no alias annotation)
};

Access access_of(const at::RecordFunction& fn) {
  Access access;
  const c10::optional<c10::OperatorName> name = fn.operator_name();
  if (!name) return access;
  const auto handle = c10::Dispatcher::singleton().findSchema(*name);
  if (!handle) return access;
  const c10::FunctionSchema& schema = handle->schema();
  access.known = true;
  for (const c10::Argument& a : schema.arguments()) access.writes_argument.push_back(a.alias_info() && a.alias_info()->isWrite());
  for (const c10::Argument& r : schema.returns()) {
    access.writes_return.push_back(!r.alias_info() || r.alias_info()->isWrite());
    access.fresh_return.push_back(!r.alias_info());
  }
  const auto none = [](const std::vector<bool>& v) { return std::none_of(v.begin(), v.end(), [](bool b) { return b; }); };
  access.view = !schema.returns().empty() && none(access.writes_argument) && none(access.writes_return);
  return access;
}

template <typename F>
void for_each_tensor(const c10::IValue& value, F&& f) {
  if (value.isTensor()) {
    f(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorVector()) f(t);
  }
}

// The checker the callbacks report to; a thread is watched by the checker of its generation.
std::atomic<StreamChecker::State*> active{nullptr};
std::atomic<uint64_t> generation{0};
thread_local uint64_t watched_generation = 0;
thread_local std::vector<size_t> entered;  // the streams this thread is in, innermost last

bool watched() { return watched_generation != 0 && watched_generation == generation.load(); }

void watch_thread() {
  if (watched()) return;
  watched_generation = generation.load();
  entered.clear();
}

// 0: the default stream.
size_t current_id() { return watched() && !entered.empty() ? entered.back() : 0; }

std::string stream_name(size_t id) { return id == 0 ? std::string("the default stream") : c10::str("stream ", id); }

}  // namespace

struct StreamChecker::State final : exec::detail::CpuStreams {
  static constexpr size_t kUnknown = static_cast<size_t>(-1);

  struct Use {
    uint64_t point;  // the using stream's count of operations at the use
    std::string op;
  };

  // What the checker knows of one storage.
  struct Entry {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // keeps the key's address from reuse
    size_t writer = kUnknown;                           // the stream of the last write
    Use write;
    std::map<size_t, Use> reads;  // since the last write, per stream
    // The stream whose operation made the storage (a GPU's caching allocator gives the block to
    // it); kUnknown where made before the checker or by an unwatched thread.
    size_t owner = kUnknown;
    std::map<size_t, Use> uses;  // the last use by each other stream that holds no claim on it
    std::set<size_t> holders;       // streams that called hold() on it
  };

  mutable std::mutex mutex;
  std::vector<Clock> streams{Clock(1, 0)};  // [id]: what each stream's work is ordered after
  Clock host;                               // what a host thread has waited for
  std::unordered_map<const c10::StorageImpl*, Entry> entries;
  // Entries used by a stream other than their owner's without its hold: checked when freed.
  std::set<const c10::StorageImpl*> lent;
  size_t touches_since_purge = 0;
  std::map<std::string, int64_t> races;  // description -> times seen
  std::unordered_map<std::string, Access> accesses;
  at::CallbackHandle callback = 0;
  exec::detail::CpuStreams* previous = nullptr;

  std::unique_ptr<exec::DeviceStream> make() override;
  std::unique_ptr<exec::DeviceStream> current() override;

  // Under the mutex from here on.
  Clock& clock(size_t id) { return streams.at(id); }

  bool ordered(size_t id, size_t other, uint64_t point) { return other == id || at(clock(id), other) >= point; }

  // The next operation of stream `id`: after what the host waited for, one more of its own.
  // Memory freed with another stream's use outstanding and no hold by it may be reused by this
  // operation, when this stream owns it, unless this stream is ordered after that use.
  void begin_op(size_t id) {
    Clock& c = clock(id);
    join(c, host);
    check_freed(id);
    if (c.size() <= id) c.resize(id + 1, 0);
    ++c[id];
  }

  void check_freed(size_t id) {
    for (auto it = lent.begin(); it != lent.end();) {
      auto e = entries.find(*it);
      if (e == entries.end()) {
        it = lent.erase(it);
        continue;
      }
      Entry& entry = e->second;
      if (!entry.storage.expired() || entry.owner != id) {
        ++it;
        continue;
      }
      for (const auto& [other, use] : entry.uses) {
        if (entry.holders.count(other) || ordered(id, other, use.point)) continue;
        ++races[c10::str("memory ", use.op, " on ", stream_name(other), " used is freed and reused on ",
                         stream_name(id), ", which owns it, with no hold by ", stream_name(other),
                         " and no wait for that use")];
      }
      entries.erase(e);
      it = lent.erase(it);
    }
  }

  const Access& access(const at::RecordFunction& fn) {
    const c10::optional<c10::OperatorName> name = fn.operator_name();
    const std::string key = name ? name->name + "." + name->overload_name : std::string(fn.name());
    auto it = accesses.find(key);
    if (it == accesses.end()) it = accesses.emplace(key, access_of(fn)).first;
    return it->second;
  }

  // `made`: t is an operation's fresh result (its storage was allocated by this operation).
  void touch(const at::Tensor& t, size_t id, bool write, const char* op, bool made = false) {
    if (!t.defined() || !t.has_storage()) return;
    const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    auto it = entries.find(key);
    if (it != entries.end() && it->second.storage.expired()) {  // a new storage at a freed one's address
      lent.erase(key);
      entries.erase(it);
      it = entries.end();
    }
    if (it == entries.end()) {
      it = entries.emplace(key, Entry{t.storage().getWeakStorageImpl()}).first;
      if (made && write) it->second.owner = id;
    }
    Entry& e = it->second;
    const uint64_t now = at(clock(id), id);
    if (e.writer != kUnknown && !ordered(id, e.writer, e.write.point)) {
      ++races[c10::str(op, " on ", stream_name(id), (write ? " writes" : " reads"), " what ", e.write.op,
                       " wrote on ", stream_name(e.writer), ", with no wait for that write")];
    }
    if (write) {
      for (const auto& [reader, read] : e.reads) {
        if (ordered(id, reader, read.point)) continue;
        ++races[c10::str(op, " on ", stream_name(id), " writes what ", read.op, " read on ", stream_name(reader),
                         ", with no wait for that read")];
      }
      e.reads.clear();
      e.writer = id;
      e.write = Use{now, op};
    } else {
      e.reads[id] = Use{now, op};
    }
    if (e.owner != kUnknown && e.owner != id && !e.holders.count(id)) {
      e.uses[id] = Use{now, op};
      lent.insert(key);
    }
    if (++touches_since_purge > 20000) purge();
  }

  void hold(const at::Tensor& t, size_t id) {
    if (!t.defined() || !t.has_storage()) return;
    const c10::StorageImpl* key = t.storage().unsafeGetStorageImpl();
    auto it = entries.find(key);
    if (it == entries.end() || it->second.storage.expired()) {
      lent.erase(key);
      it = entries.insert_or_assign(key, Entry{t.storage().getWeakStorageImpl()}).first;
    }
    it->second.holders.insert(id);
    it->second.uses.erase(id);
  }

  // Entries of freed storages that no stream's reuse needs to check: no tensor reaches them.
  void purge() {
    touches_since_purge = 0;
    for (auto it = entries.begin(); it != entries.end();) {
      it = it->second.storage.expired() && !lent.count(it->first) ? entries.erase(it) : std::next(it);
    }
  }
};

namespace {

// What on_start found, for on_end: the operation's stream and what it writes.
struct OpContext final : at::ObserverContext {
  OpContext(size_t id, const Access& access) : id(id), access(access) {}
  size_t id;
  const Access& access;  // an element of State::accesses, whose elements never move
};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  StreamChecker::State* state = active.load();
  if (!state || !watched()) return nullptr;
  const size_t id = current_id();
  std::lock_guard<std::mutex> lock(state->mutex);
  state->begin_op(id);
  const Access& access = state->access(fn);
  if (access.view) return nullptr;  // nothing for on_end either: a view's returns are no writes
  const auto inputs = fn.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool write = access.known && i < access.writes_argument.size() && access.writes_argument[i];
    for_each_tensor(inputs[i], [&](const at::Tensor& t) { state->touch(t, id, write, fn.name()); });
  }
  return std::make_unique<OpContext>(id, access);
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  StreamChecker::State* state = active.load();
  const auto* op = static_cast<const OpContext*>(context);
  if (!state || !op) return;
  std::lock_guard<std::mutex> lock(state->mutex);
  const Access& access = op->access;
  const auto& outputs = fn.outputs();
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (access.known && i < access.writes_return.size() && !access.writes_return[i]) continue;  // a view
    const bool made = access.known && i < access.fresh_return.size() && access.fresh_return[i];
    for_each_tensor(outputs[i], [&](const at::Tensor& t) { state->touch(t, op->id, /*write=*/true, fn.name(), made); });
  }
}

class CheckedEvent final : public exec::StreamEvent {
 public:
  CheckedEvent(StreamChecker::State& state, Clock clock) : state_(state), clock_(std::move(clock)) {}
  void synchronize() const override {
    std::lock_guard<std::mutex> lock(state_.mutex);
    join(state_.host, clock_);
  }
  const Clock& clock() const { return clock_; }

 private:
  StreamChecker::State& state_;
  Clock clock_;
};

class CheckedScope final : public exec::DeviceStream::Scope {
 public:
  CheckedScope() : generation_(watched_generation) {}
  ~CheckedScope() override {
    if (watched_generation == generation_ && !entered.empty()) entered.pop_back();
  }

 private:
  uint64_t generation_;
};

class CheckedStream final : public exec::DeviceStream {
 public:
  CheckedStream(StreamChecker::State& state, size_t id) : state_(state), id_(id) {}
  torch::Device device() const override { return torch::kCPU; }
  std::unique_ptr<Scope> enter() override {
    watch_thread();
    entered.push_back(id_);
    return std::make_unique<CheckedScope>();
  }
  std::shared_ptr<const exec::StreamEvent> record() override {
    std::lock_guard<std::mutex> lock(state_.mutex);
    Clock clock = state_.clock(id_);
    join(clock, state_.host);
    return std::make_shared<CheckedEvent>(state_, std::move(clock));
  }
  void wait(const exec::StreamEvent* event) override {
    if (!event) return;
    const auto* checked = dynamic_cast<const CheckedEvent*>(event);
    if (!checked) {
      event->synchronize();
      return;
    }
    std::lock_guard<std::mutex> lock(state_.mutex);
    join(state_.clock(id_), checked->clock());
  }
  void join_current() override {
    const size_t current = current_id();
    std::lock_guard<std::mutex> lock(state_.mutex);
    Clock clock = state_.clock(current);
    join(clock, state_.host);
    join(state_.clock(id_), clock);
  }
  void hold(const torch::Tensor& tensor) override {
    std::lock_guard<std::mutex> lock(state_.mutex);
    state_.hold(tensor, id_);
  }
  void synchronize() override {
    std::lock_guard<std::mutex> lock(state_.mutex);
    join(state_.host, state_.clock(id_));
  }

 private:
  StreamChecker::State& state_;
  size_t id_;
};

}  // namespace

std::unique_ptr<exec::DeviceStream> StreamChecker::State::make() {
  std::lock_guard<std::mutex> lock(mutex);
  streams.emplace_back();
  return std::make_unique<CheckedStream>(*this, streams.size() - 1);
}

std::unique_ptr<exec::DeviceStream> StreamChecker::State::current() {
  return std::make_unique<CheckedStream>(*this, current_id());
}

StreamChecker::StreamChecker() : state_(std::make_unique<State>()) {
  State* expected = nullptr;
  SP_CHECK(active.compare_exchange_strong(expected, state_.get()), "StreamChecker: one at a time");
  ++generation;
  watch_thread();
  state_->previous = exec::detail::set_cpu_streams(state_.get());
  state_->callback = at::addGlobalCallback(at::RecordFunctionCallback(&on_start, &on_end)
                                               .needsInputs(true)
                                               .needsOutputs(true)
                                               .scopes({at::RecordScope::FUNCTION}));
}

StreamChecker::~StreamChecker() {
  at::removeCallback(state_->callback);
  exec::detail::set_cpu_streams(state_->previous);
  ++generation;  // no thread is watched any more
  active.store(nullptr);
}

void StreamChecker::watch_this_thread() {
  if (active.load()) watch_thread();
}

std::vector<std::string> StreamChecker::races() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  std::vector<std::string> out;
  for (const auto& [what, times] : state_->races) out.push_back(c10::str(what, " (", times, "x)"));
  return out;
}

}  // namespace stalepipe::test
