// Symbol visibility for libloom (base layer). Everything is hidden by default
// (-fvisibility=hidden); the public API is exported with LOOM_API. Keep this header tiny: every
// other header includes it.
#pragma once

#if defined(_WIN32)
#define LOOM_API __declspec(dllexport)
#else
#define LOOM_API __attribute__((visibility("default")))
#endif

#define LOOM_LIKELY(x) __builtin_expect(!!(x), 1)
#define LOOM_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LOOM_NOINLINE __attribute__((noinline))
#define LOOM_ALWAYS_INLINE inline __attribute__((always_inline))
