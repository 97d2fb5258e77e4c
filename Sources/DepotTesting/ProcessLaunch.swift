public import Foundation

/// Starts child processes one at a time across a whole test process.
///
/// Foundation's `Process.run()` on Linux crashed (a bad read inside its own memcpy) when
/// several tests started processes at the same moment (`sqlite3`, `mdb_stat`, the crash and
/// fault writers), which Swift Testing does by running tests in parallel. Only the start is
/// serialized; the children run, and are waited for, concurrently.
public enum ProcessLaunch {
    private static let lock = NSLock()

    /// Starts `process`, never at the same time as another start through this function.
    public static func run(_ process: Process) throws {
        lock.lock()
        defer { lock.unlock() }
        try process.run()
    }
}
