// Whether this test binary is built with AddressSanitizer or ThreadSanitizer (gcc or clang),
// for the tests whose figures hold for the normal build only: both replace malloc, and both
// slow the code several times.
#pragma once

namespace stalepipe::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizer = true;  // gcc's
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizer = true;  // clang's
#else
constexpr bool kSanitizer = false;
#endif
#else
constexpr bool kSanitizer = false;
#endif

}  // namespace stalepipe::test
