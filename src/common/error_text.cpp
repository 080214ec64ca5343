#include "error_text_impl.h"

#include <algorithm>

#include <c10/util/Exception.h>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
extern "C" void __tsan_ignore_thread_begin();
extern "C" void __tsan_ignore_thread_end();
#define SP_IGNORE_THREAD_BEGIN() __tsan_ignore_thread_begin()
#define SP_IGNORE_THREAD_END() __tsan_ignore_thread_end()
#endif
#endif
#ifndef SP_IGNORE_THREAD_BEGIN
#define SP_IGNORE_THREAD_BEGIN()
#define SP_IGNORE_THREAD_END()
#endif

namespace stalepipe {

std::string one_line_message(const std::exception& e) {
  SP_IGNORE_THREAD_BEGIN();
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string message = c10_error ? c10_error->what_without_backtrace() : e.what();
  SP_IGNORE_THREAD_END();
  std::replace(message.begin(), message.end(), '\n', ' ');
  return message;
}

}  // namespace stalepipe
