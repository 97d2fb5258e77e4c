import CSQLite
package import DepotCore
import Foundation
import NIOConcurrencyHelpers

/// Checkpoints the store's WAL on a thread of its own, so that commits do not wait for it.
///
/// SQLite's default checkpoints inside the commit that takes the WAL past 1,000 pages, so
/// that one commit waits for the copy and both syncs. Here the writer's WAL hook counts the
/// frames after each commit and, once ``threshold`` are not yet copied, wakes this thread,
/// which runs passive checkpoints (no write lock, no waiting for readers) on its own
/// connection, repeated while they make progress. A thread, not a dispatch queue: a
/// checkpoint blocks for its syncs and would hold a worker that Swift's tasks and the
/// store's reads share. It runs at the default priority, since a starved thread holds the
/// checkpoint lock for longer.
///
/// The WAL restarts only at a write that finds every frame copied, which a checkpoint
/// beside a busy writer rarely leaves. So once the WAL holds ``restartFrames`` and fewer
/// than ``threshold`` frames are left to copy, the writer copies them itself in the hook and
/// its next transaction restarts the WAL, which keeps the file bounded. Should the thread
/// fall ``behindFrames`` behind, the writer checkpoints in its commits again, as SQLite's
/// default does, until it has caught up; should the thread's connection fail to open, for
/// good.
package final class Checkpointer: @unchecked Sendable {
    // @unchecked: `connection` is used only on the checkpointer's thread, `started` only on
    // the writer's (the lane runs one job at a time); everything else is in `state`.

    /// Frames not yet copied that start a checkpoint on the thread: SQLite's own default.
    package let threshold: Int32
    /// The WAL's size in frames from which the writer copies the remainder itself, so that
    /// the WAL restarts.
    var restartFrames: Int32 { 4 * threshold }
    /// Frames not yet copied from which the writer checkpoints itself again.
    package var behindFrames: Int32 { 8 * threshold }
    /// Passive checkpoints in a row, while each copies something the one before did not.
    static let maximumRounds = 16

    private struct State {
        var running = false
        var closed = false
        /// The writer checkpoints in its commits: the thread's connection could not be
        /// opened (for good), or the thread fell behind (until the writer has caught up).
        var failed = false
        var takenOver = false
        /// The WAL's size at the last commit: a smaller one means the WAL restarted.
        var lastFrames: Int32 = 0
        /// Frames of the current WAL copied into the database file, as far as known.
        var copied: Int32 = 0
        /// Counts WAL restarts, so a checkpoint that ran across one does not report frames
        /// of the old WAL as copied in the new.
        var generation = 0
        /// The WAL's size from which the writer next tries a checkpoint of its own.
        var nextHere: Int32 = 0
        /// The WAL generation the running checkpoint started in.
        var runningGeneration = 0
        var checkpoints = 0
    }

    private let state = NIOLockedValueBox(State())
    /// Wakes the checkpointer's thread: `true` when there is a checkpoint to run or the
    /// store is closing.
    private let wake = ConditionLock(value: false)
    /// Set by the thread as it exits.
    private let finished = ConditionLock(value: false)
    private let path: String
    private let log: StoreLog
    /// Used only on the checkpointer's thread.
    private var connection: Connection?
    private var started = false
    /// Tests: runs on the checkpointer's thread before each checkpoint it starts.
    package var beforeCheckpoint: (@Sendable () -> Void)?

    package init(path: String, log: StoreLog, threshold: Int32 = 1_000) {
        self.path = path
        self.log = log
        self.threshold = max(1, threshold)
    }

    /// Checkpoints that copied frames, by the thread or the writer, since the store opened.
    package var checkpoints: Int { state.withLockedValue { $0.checkpoints } }

    /// Times the writer's commits found the WAL restarted (smaller than at the commit
    /// before), since the store opened.
    package var restarts: Int { state.withLockedValue { $0.generation } }

    /// Called by the writer connection's WAL hook after each commit, on the writer's
    /// thread, with the frames now in the WAL.
    fileprivate func committed(frames: Int32, on writer: OpaquePointer) {
        enum Action { case none, here, takeOver, thread }
        let action = state.withLockedValue { s -> Action in
            if s.closed { return .none }
            if frames < s.lastFrames {
                s.generation &+= 1
                s.copied = 0
                s.nextHere = 0
            }
            s.lastFrames = frames
            let pending = frames &- s.copied
            if s.failed || s.takenOver {
                // SQLite's default: a checkpoint at every commit past the threshold.
                if pending >= threshold { return .here }
                s.takenOver = false
                return .none
            }
            if s.running {
                guard pending >= behindFrames else { return .none }
                // The thread stops after its round; until then the writer's checkpoints
                // find its lock taken and return at once.
                s.takenOver = true
                return .takeOver
            }
            if pending >= threshold {
                s.running = true
                s.runningGeneration = s.generation
                return .thread
            }
            if frames >= restartFrames && pending > 0 && frames >= s.nextHere {
                // Not at every commit when a reader's snapshot keeps frames uncopied.
                s.nextHere = frames &+ threshold / 4
                return .here
            }
            return .none
        }
        switch action {
        case .none: break
        case .here, .takeOver:
            if case .takeOver = action {
                log.logger.warning(
                    "SQLite WAL checkpointer thread fell behind; commits checkpoint until they have caught up",
                    metadata: ["depot.location": .string(path), "depot.walFrames": .stringConvertible(frames)])
            }
            // A passive checkpoint on the writer, as SQLite's default hook makes; an error
            // or a busy checkpoint lock leaves the frames in the WAL, copied later.
            var total: Int32 = 0
            var done: Int32 = 0
            let start = DispatchTime.now().uptimeNanoseconds
            if sqlite3_wal_checkpoint_v2(writer, nil, SQLITE_CHECKPOINT_PASSIVE, &total, &done) == SQLITE_OK {
                let copied = state.withLockedValue { s -> Bool in
                    guard done > s.copied else { return false }
                    s.copied = done
                    s.checkpoints += 1
                    return true
                }
                if copied { report(onWriter: true, frames: done, total: total, since: start) }
            }
        case .thread:
            startIfNeeded()
            wake.lock()
            wake.unlock(withValue: true)
        }
    }

    /// Starts the thread at the first checkpoint (a store that never fills the WAL never
    /// has one). Called on the writer's thread only.
    private func startIfNeeded() {
        if started { return }
        started = true
        let thread = Thread { [self] in run() }
        thread.name = "depot.sqlite.checkpointer"
        thread.start()
    }

    private func run() {
        while true {
            wake.lock(whenValue: true)
            wake.unlock(withValue: false)
            let (closed, generation) = state.withLockedValue { ($0.closed, $0.runningGeneration) }
            if closed { break }
            beforeCheckpoint?()
            checkpoint(generation: generation)
        }
        connection?.close()
        connection = nil
        finished.lock()
        finished.unlock(withValue: true)
    }

    private func checkpoint(generation: Int) {
        var copied: Int32 = -1
        defer {
            state.withLockedValue { s in
                s.running = false
                if s.generation == generation, copied > s.copied { s.copied = copied }
            }
        }
        guard let connection = openConnection(), let handle = connection.handle else { return }
        let start = DispatchTime.now().uptimeNanoseconds
        var total: Int32 = 0
        defer { if copied > 0 { report(onWriter: false, frames: copied, total: total, since: start) } }
        for _ in 0..<Self.maximumRounds {
            if state.withLockedValue({ $0.closed || $0.takenOver }) { return }
            var done: Int32 = 0
            let rc = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, &total, &done)
            // Busy: another connection (the writer, another process) is checkpointing.
            if rc == SQLITE_BUSY { return }
            guard rc == SQLITE_OK else {
                log.failed("checkpointing the WAL of \(path)", connection.error(rc, "Checkpointing the WAL of \(path)"))
                return
            }
            if done <= copied { return }  // nothing more to copy, or a reader holds the rest
            copied = done
            state.withLockedValue { $0.checkpoints += 1 }
            if done >= total { return }
        }
    }

    /// Logs a checkpoint that copied pages (at `debug`) and reports it to the metrics.
    private func report(onWriter: Bool, frames: Int32, total: Int32, since start: UInt64) {
        let nanoseconds = DispatchTime.now().uptimeNanoseconds &- start
        log.telemetry?.checkpointed(onWriter: onWriter, nanoseconds: nanoseconds)
        log.logger.debug(
            "SQLite WAL checkpointed",
            metadata: [
                "depot.location": .string(path), "depot.on": .string(onWriter ? "writer" : "thread"),
                "depot.walFramesCopied": .stringConvertible(frames), "depot.walFrames": .stringConvertible(total),
                "depot.milliseconds": .stringConvertible(Double(nanoseconds) / 1e6),
            ])
    }

    private func openConnection() -> Connection? {
        if let connection { return connection }
        do {
            let opened = try Connection.open(path: path, create: false, busyTimeout: .zero)
            // Only the writer's close checkpoints and removes the WAL.
            opened.setCheckpointOnClose(false)
            // A connection finds the WAL when it first reads; until then a checkpoint
            // reports "not in WAL mode" and copies nothing.
            _ = try opened.scalarText("PRAGMA schema_version")
            connection = opened
            return opened
        } catch {
            log.failed("opening the WAL checkpointer's connection to \(path) (commits checkpoint themselves instead)", error)
            state.withLockedValue { $0.failed = true }
            return nil
        }
    }

    /// Waits for a running checkpoint, then closes the connection and ends the thread;
    /// later commits checkpoint nothing (the writer's own close does the last one).
    /// Blocks: call it on the writer's lane, before the writer connection closes.
    package func close() {
        state.withLockedValue { $0.closed = true }
        guard started else { return }
        wake.lock()
        wake.unlock(withValue: true)
        finished.lock(whenValue: true)
        finished.unlock()
    }
}

extension Connection {
    /// Hands this (writer) connection's checkpoints to `checkpointer` (see ``Checkpointer``).
    package func checkpoint(with checkpointer: Checkpointer) {
        guard let handle else { return }
        walHookContext = checkpointer
        sqlite3_wal_hook(handle, { context, db, _, frames in
            guard let context, let db else { return SQLITE_OK }
            Unmanaged<Checkpointer>.fromOpaque(context).takeUnretainedValue().committed(frames: frames, on: db)
            return SQLITE_OK
        }, Unmanaged.passUnretained(checkpointer).toOpaque())
    }
}
