// Whether this test binary is built with a sanitizer that replaces malloc (AddressSanitizer or
// ThreadSanitizer, gcc or clang), for the tests whose figures hold for the normal allocator only.
#pragma once

namespace stalepipe::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitizerMalloc = true;  // gcc's
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitizerMalloc = true;  // clang's
#else
constexpr bool kSanitizerMalloc = false;
#endif
#else
constexpr bool kSanitizerMalloc = false;
#endif

}  // namespace stalepipe::test
