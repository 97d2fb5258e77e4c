public import Foundation
import NIOConcurrencyHelpers

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Starts child processes for the tests (`sqlite3`, `mdb_stat`, the crash and fault
/// writers) with `posix_spawn`, not Foundation's `Process`.
///
/// On this toolchain `Process.run()` crashed inside its own `memcpy` now and then when
/// Swift Testing ran many suites in parallel, even with every start serialized; a test
/// process that crashes loses every result. `posix_spawn` does no work in the parent
/// beyond building `argv` and `envp`.
public enum ProcessLaunch {
    /// How a child ended.
    public struct Exit: Sendable, Equatable, CustomStringConvertible {
        /// The exit code, when the child exited.
        public let code: Int32?
        /// The signal that ended the child, when one did.
        public let signal: Int32?

        /// Whether the child exited with code 0.
        public var succeeded: Bool { code == 0 }
        /// The exit code, or 128 + the signal (the shell's convention).
        public var status: Int32 { code ?? (128 + (signal ?? 0)) }

        init(waitStatus: Int32) {
            let signal = waitStatus & 0x7f
            if signal == 0 {
                code = (waitStatus >> 8) & 0xff
                self.signal = nil
            } else {
                code = nil
                self.signal = signal
            }
        }

        /// `exit <code>` or `signal <number>`.
        public var description: String { code.map { "exit \($0)" } ?? "signal \(signal ?? 0)" }
    }

    /// Where a child's standard output or error goes.
    public enum Output: Sendable {
        /// A pipe the launcher reads to its end.
        case capture
        /// `/dev/null`.
        case discard
        /// A file, created or truncated.
        case file(String)
    }

    /// A started child.
    public struct Child: Sendable {
        /// The child's process id.
        public let pid: pid_t
        let stdout: Int32?
        let stderr: Int32?
    }

    /// Starts `path` with `arguments`, the test process's environment plus `environment`.
    ///
    /// - Throws: `POSIXError` when the child cannot be started.
    public static func spawn(
        _ path: String, _ arguments: [String], environment: [String: String] = [:],
        stdout: Output = .capture, stderr: Output = .capture
    ) throws -> Child {
        try launching.withLock { () throws -> Child in
            try spawnLocked(path, arguments, environment: environment, stdout: stdout, stderr: stderr)
        }
    }

    // A pthread lock, which Thread Sanitizer sees (`Synchronization.Mutex` waits inside
    // the uninstrumented standard library when contended).
    private static let launching = NIOLock()

    private static func spawnLocked(
        _ path: String, _ arguments: [String], environment: [String: String],
        stdout: Output, stderr: Output
    ) throws -> Child {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var parentEnds: [Int32] = []
        var childEnds: [Int32] = []
        defer { for fd in childEnds { close(fd) } }

        func route(_ output: Output, to target: Int32) throws -> Int32? {
            switch output {
            case .discard:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", O_WRONLY, 0)
                return nil
            case .file(let file):
                posix_spawn_file_actions_addopen(&actions, target, file, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
                return nil
            case .capture:
                var fds: [Int32] = [0, 0]
                guard pipe(&fds) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
                // Both ends close-on-exec (Glibc does not export pipe2 to Swift, so under
                // `launching`, which every spawn holds): tests start children from many
                // threads, and a write end inherited by another child would keep this pipe
                // open, and its reader waiting, until that child ends. dup2 onto the
                // child's 1 or 2 clears the flag on the copy it uses.
                _ = fcntl(fds[0], F_SETFD, FD_CLOEXEC)
                _ = fcntl(fds[1], F_SETFD, FD_CLOEXEC)
                parentEnds.append(fds[0])
                childEnds.append(fds[1])
                posix_spawn_file_actions_adddup2(&actions, fds[1], target)
                return fds[0]
            }
        }
        let out: Int32?
        let err: Int32?
        do {
            out = try route(stdout, to: 1)
            err = try route(stderr, to: 2)
        } catch {
            for fd in parentEnds { close(fd) }
            throw error
        }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)

        var merged = ProcessInfo.processInfo.environment
        for (key, value) in environment { merged[key] = value }
        let argv = ([path] + arguments).map { strdup($0) }
        let envp = merged.map { strdup("\($0.key)=\($0.value)") }
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        // The child inherits the calling thread's signal mask and ignored signals; a test
        // thread (or the runtime's) may block some, and a child that ignores SIGTERM or
        // blocks SIGINT would outlive the test that means to stop it.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var pid: pid_t = 0
        let rc = (argv + [nil]).withUnsafeBufferPointer { a -> Int32 in
            (envp + [nil]).withUnsafeBufferPointer { e -> Int32 in
                guard let a = a.baseAddress, let e = e.baseAddress else { return EINVAL }
                return posix_spawn(&pid, path, &actions, &attributes, a, e)
            }
        }
        guard rc == 0 else {
            for fd in parentEnds { close(fd) }
            throw POSIXError(POSIXErrorCode(rawValue: rc) ?? .EIO)
        }
        return Child(pid: pid, stdout: out, stderr: err)
    }

    /// Reads the child's captured outputs to their ends (both at once, so neither pipe can
    /// fill up and block the child), then waits for it.
    public static func finish(_ child: Child) -> (exit: Exit, stdout: String, stderr: String) {
        var buffers: [Int32: [UInt8]] = [:]
        var open = [child.stdout, child.stderr].compactMap { $0 }
        for fd in open { buffers[fd] = [] }
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while !open.isEmpty {
            var polls = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polls, nfds_t(polls.count), -1)
            if ready < 0 {
                if errno == EINTR { continue }
                break
            }
            for p in polls where p.revents != 0 {
                let n = chunk.withUnsafeMutableBytes { read(p.fd, $0.baseAddress, $0.count) }
                if n > 0 {
                    buffers[p.fd]?.append(contentsOf: chunk[0..<n])
                } else if n == 0 || errno != EINTR {
                    close(p.fd)
                    open.removeAll { $0 == p.fd }
                }
            }
        }
        let exit = wait(child.pid)
        let text = { (fd: Int32?) in fd.flatMap { buffers[$0] }.map { String(decoding: $0, as: UTF8.self) } ?? "" }
        return (exit, text(child.stdout), text(child.stderr))
    }

    /// Waits for a child to end.
    public static func wait(_ pid: pid_t) -> Exit {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return Exit(waitStatus: status)
    }

    /// Waits up to `seconds` for a child to end; `nil` when it has not.
    public static func wait(_ pid: pid_t, seconds: Double) -> Exit? {
        let deadline = Date(timeIntervalSinceNow: seconds)
        var status: Int32 = 0
        while true {
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { return Exit(waitStatus: status) }
            if r < 0 && errno != EINTR { return nil }
            if Date() >= deadline { return nil }
            usleep(5_000)
        }
    }

    /// Runs `path` to its end and returns how it ended and what it printed.
    public static func run(
        _ path: String, _ arguments: [String], environment: [String: String] = [:]
    ) throws -> (exit: Exit, stdout: String, stderr: String) {
        finish(try spawn(path, arguments, environment: environment))
    }

    /// ``run(_:_:environment:)`` on a thread of its own, for async tests: waiting for a
    /// child (initdb, a server restart, a helper process) on a thread of Swift's cooperative
    /// pool holds one of the few threads every task and every store's queues share, and
    /// with the whole test suite running at once on two cores that starved other tests
    /// past their time limits.
    public static func runOffPool(
        _ path: String, _ arguments: [String], environment: [String: String] = [:]
    ) async throws -> (exit: Exit, stdout: String, stderr: String) {
        try await withCheckedThrowingContinuation { continuation in
            let thread = Thread {
                continuation.resume(with: Result { try run(path, arguments, environment: environment) })
            }
            thread.name = "depot.test.child"
            thread.start()
        }
    }

    /// An executable of this build (`depot`, `depot-crash-writer`): in the same products
    /// directory as the test runner, whatever the scratch path (`.build`, `.build-tsan`).
    /// On Linux the runner is `<products>/DepotPackageTests.xctest`; on macOS it is inside
    /// that bundle, so every ancestor directory of the running executable is tried.
    public static func builtProduct(_ name: String) -> String? {
        var starts: [URL] = []
        if let url = Bundle.main.executableURL { starts.append(url) }
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            starts.append(URL(fileURLWithPath: path))
        }
        starts.append(URL(fileURLWithPath: CommandLine.arguments[0]).standardizedFileURL)
        for start in starts {
            var directory = start.deletingLastPathComponent()
            for _ in 0..<5 {
                let candidate = directory.appendingPathComponent(name).path
                if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
                directory = directory.deletingLastPathComponent()
            }
        }
        return nil
    }
}
