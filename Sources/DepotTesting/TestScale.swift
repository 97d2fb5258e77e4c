import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// How much work Depot's own randomized tests do per run: the size `make test` runs
/// (`ci`), a smaller one under Thread Sanitizer (`tsan`), and the documented full size
/// (`full`, for `DEPOT_STRESS=full`, `make stress`). An environment variable names the
/// count for one test directly.
///
/// Thread Sanitizer makes everything many times slower. A randomized check of answers, which
/// runs one request after another, has no race for it to find: it keeps its shape under TSan
/// and runs fewer rounds, and its full count runs in the uninstrumented `make test`. The
/// reliability tests' concurrent workloads shrink under TSan too, to sizes that still
/// interleave their workers.
package enum TestScale {
    /// Whether the documented full sizes were asked for (`DEPOT_STRESS=full`).
    package static let isFull = ProcessInfo.processInfo.environment["DEPOT_STRESS"] == "full"

    /// Whether this process runs under Thread Sanitizer: the Makefile's test-tsan target
    /// sets DEPOT_TSAN=1, and the TSan runtime's entry point is looked up as a fallback for
    /// a plain `swift test --sanitize=thread`.
    package static let underThreadSanitizer: Bool = {
        if ProcessInfo.processInfo.environment["DEPOT_TSAN"] == "1" { return true }
        #if canImport(Glibc)
        return dlsym(nil, "__tsan_init") != nil  // nil is RTLD_DEFAULT on glibc
        #else
        return false
        #endif
    }()

    /// The size for this run; the environment variable `name`, when it holds a count,
    /// overrides it.
    package static func size(_ name: String, ci: Int, tsan: Int, full: Int? = nil) -> Int {
        if let text = ProcessInfo.processInfo.environment[name], let value = Int(text), value >= 0 { return value }
        if isFull { return full ?? ci }
        return underThreadSanitizer ? tsan : ci
    }
}
