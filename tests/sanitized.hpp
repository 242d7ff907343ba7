// kSanitized: true in the -O0 AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/, suite
// `asan`), whose pass is there for memory safety on the shapes the unit suite runs, not for coverage: the
// tests with large samples cut them there (each says how), the unit suite runs them in full.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
