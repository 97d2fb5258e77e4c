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
/// connection, repeated while they make progress, then syncs the database file. A thread,
/// not a dispatch queue: a checkpoint blocks for its syncs and would hold a worker that
/// Swift's tasks and the store's reads share. It runs at the default priority, since a
/// starved thread holds the checkpoint lock for longer.
///
/// The WAL restarts only at a write that finds every frame copied, which a checkpoint
/// beside a busy writer rarely leaves. So once the WAL holds ``restartFrames``, the writer
/// copies what is left itself in the hook and its next transaction restarts the WAL, which
/// keeps the file bounded. That copy holds up every commit queued behind it for as long as
/// it takes, so the writer makes it only when at most ``writerCopyFrames`` are left; with
/// more, the thread runs another round first (it leaves only what commits added while it
/// ran), unless the WAL has grown to twice ``restartFrames`` (a thread that cannot keep
/// up, a reader holding frames), where the writer copies whatever is left. Should the thread
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
    /// The most frames the writer copies itself for a restart while the WAL is below twice
    /// ``restartFrames``.
    package var writerCopyFrames: Int32 { max(1, threshold / 8) }
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
        /// The WAL's size from which the writer next starts a round on the thread to leave
        /// it less to copy for a restart.
        var nextRound: Int32 = 0
        /// The WAL generation the running checkpoint started in.
        var runningGeneration = 0
        var checkpoints = 0
        /// The most frames one of the writer's copies for a restart took while the WAL was
        /// below twice ``restartFrames``.
        var largestRestartCopy: Int32 = 0
        var databaseSyncs = 0
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
    /// The read transactions reader connections keep (see `KeptSnapshots`): idle ones are
    /// ended before a checkpoint copies frames, since a kept one holds frames back from the
    /// copy and the WAL from its restart; and from the writer's copy for a restart until the
    /// WAL has restarted, busy ones end theirs when their read does. Set before the WAL hook
    /// is installed.
    var kept: KeptSnapshots?

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

    /// The most frames the writer copied in one checkpoint of its own that lets the WAL
    /// restart, while the WAL was below twice ``restartFrames`` (tests: at most
    /// ``writerCopyFrames``).
    package var largestRestartCopy: Int32 { state.withLockedValue { $0.largestRestartCopy } }

    /// Times the thread synced the database file after copying frames into it.
    package var databaseSyncs: Int { state.withLockedValue { $0.databaseSyncs } }

    /// Called by the writer connection's WAL hook after each commit, on the writer's
    /// thread, with the frames now in the WAL.
    fileprivate func committed(frames: Int32, on writer: OpaquePointer) {
        /// `here`: SQLite's default; `restart`: the copy that lets the WAL restart.
        enum Action { case none, here, restart, takeOver, thread }
        let action = state.withLockedValue { s -> Action in
            if s.closed { return .none }
            if frames < s.lastFrames {
                s.generation &+= 1
                kept?.restartPending.store(false, ordering: .relaxed)
                s.copied = 0
                s.nextHere = 0
                s.nextRound = 0
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
            guard frames >= restartFrames && pending > 0 else { return .none }
            if pending > writerCopyFrames && frames < 2 * restartFrames {
                // Not at every commit when the thread's rounds leave as much (a reader's
                // snapshot keeps frames uncopied).
                guard frames >= s.nextRound else { return .none }
                s.nextRound = frames &+ writerCopyFrames
                s.running = true
                s.runningGeneration = s.generation
                return .thread
            }
            // Not at every commit when a reader's snapshot keeps frames uncopied.
            guard frames >= s.nextHere else { return .none }
            s.nextHere = frames &+ threshold / 4
            return .restart
        }
        switch action {
        case .none: break
        case .here, .restart, .takeOver:
            if case .takeOver = action {
                log.logger.warning(
                    "SQLite WAL checkpointer thread fell behind; commits checkpoint until they have caught up",
                    metadata: ["depot.location": .string(path), "depot.walFrames": .stringConvertible(frames)])
            }
            // A passive checkpoint on the writer, as SQLite's default hook makes; an error
            // or a busy checkpoint lock leaves the frames in the WAL, copied later.
            // Every copy the writer makes is one the WAL should restart after (or one of a
            // thread fallen behind): until it has, reads keep no transaction.
            kept?.restartPending.store(true, ordering: .relaxed)
            kept?.releaseIdle(all: true)
            var total: Int32 = 0
            var done: Int32 = 0
            let start = DispatchTime.now().uptimeNanoseconds
            if sqlite3_wal_checkpoint_v2(writer, nil, SQLITE_CHECKPOINT_PASSIVE, &total, &done) == SQLITE_OK {
                let copied = state.withLockedValue { s -> Bool in
                    guard done > s.copied else { return false }
                    if case .restart = action, frames < 2 * restartFrames {
                        s.largestRestartCopy = max(s.largestRestartCopy, done &- s.copied)
                    }
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
            kept?.releaseIdle(all: true)
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
            if state.withLockedValue({ $0.closed || $0.takenOver }) { break }
            var done: Int32 = 0
            let rc = sqlite3_wal_checkpoint_v2(handle, nil, SQLITE_CHECKPOINT_PASSIVE, &total, &done)
            // Busy: another connection (the writer, another process) is checkpointing.
            if rc == SQLITE_BUSY { break }
            guard rc == SQLITE_OK else {
                log.failed("checkpointing the WAL of \(path)", connection.error(rc, "Checkpointing the WAL of \(path)"))
                break
            }
            if done <= copied { break }  // nothing more to copy, or a reader holds the rest
            copied = done
            state.withLockedValue { $0.checkpoints += 1 }
            if done >= total { break }
        }
        // SQLite syncs the database file only in a checkpoint that copies the whole WAL,
        // which here is mostly the writer's copy before a restart: every page this thread
        // copied since the last restart would be written out in that sync, while commits
        // wait for it, and the larger the database, the more distinct pages a round
        // leaves. Syncing here writes them out on this thread instead.
        if copied > 0 {
            let rc = connection.syncMainFile()
            if rc == SQLITE_OK {
                state.withLockedValue { $0.databaseSyncs += 1 }
            } else {
                log.failed("syncing the database file of \(path)", connection.error(rc, "Syncing the database file of \(path)"))
            }
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
