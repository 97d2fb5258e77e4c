import CLibPQ
import DepotCore
import Foundation
import Synchronization

// Reads from streaming standbys, writes to the primary.
//
// A connection string that names several hosts (libpq's `host=a,b,c`, or
// `postgres://u@a:5432,b:5432/db`) names a primary and its standbys. libpq picks the host
// for each connection by `target_session_attrs`, which the store sets per connection: the
// writer and the listener `read-write` (the primary, whichever host is it now, so a store
// follows a failover when it reconnects), the readers `prefer-standby` (a standby when one
// is up, else the primary). Notifications are heard on the primary, where every commit is
// (a standby cannot LISTEN).
//
// Read-your-writes: after each commit the writer reads the primary's write-ahead log
// position in the same round trip (`pg_current_wal_insert_lsn()` after the COMMIT, which
// is past the commit's record). A reader on a standby that has not been seen to replay that
// far asks it (`pg_last_wal_replay_lsn()`) until it has, for at most `standbyWait`; then the
// primary serves the read, on a connection of its own (`primaryReader`), one such read at a
// time. Schema changes are waited for under either consistency, since a
// standby behind one would serve the old layout. Other stores' commits heard on the listener
// count as this store's writes (the listener reads the primary's position before publishing
// them), so an observation's read after a commit sees that commit.
extension PostgresEngine {
    /// Whether `conninfo` names more than one host (libpq's own parse of it).
    static func namesSeveralHosts(_ conninfo: String) throws(DepotError) -> Bool {
        var failure: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(conninfo, &failure) else {
            let message = failure.map { String(cString: $0) } ?? "it cannot be parsed"
            if let failure { PQfreemem(failure) }
            throw DepotError(.invalidConfiguration, "The PostgreSQL connection string is not valid: \(PGRedaction(conninfo: conninfo).redact(message).trimmingCharacters(in: .whitespacesAndNewlines))")
        }
        defer { PQconninfoFree(options) }
        var option = options
        var hosts = 0
        while let keyword = option.pointee.keyword {
            let name = String(cString: keyword)
            if name == "host" || name == "hostaddr", let value = option.pointee.val {
                hosts = max(hosts, String(cString: value).split(separator: ",", omittingEmptySubsequences: false).count)
            }
            option += 1
        }
        return hosts > 1
    }

    /// The statement that reads the primary's write-ahead log position after a commit.
    static let positionStep = PGConnection.Step(sql: "SELECT pg_current_wal_insert_lsn()::text", prepare: true, context: "Reading the write-ahead log position")

    /// The primary's write-ahead log position now, read on `connection`.
    static func currentPosition(_ connection: PGConnection) throws(DepotError) -> UInt64 {
        try position(of: connection.run([positionStep])[0])
    }

    static func position(of result: PGResult) throws(DepotError) -> UInt64 {
        guard result.rowCount == 1, !result.isNull(0, 0), let position = PGConnection.lsn(result.text(0, 0)) else {
            throw DepotError(.backend, "PostgreSQL did not return its write-ahead log position.")
        }
        return position
    }

    /// Records the position a standby must replay before it serves this store's reads.
    func noteCommit(at position: UInt64, schemaChanged: Bool = false) {
        // The writer and the listener both note positions: keep the larger.
        func raise(_ atomic: borrowing Atomic<UInt64>) {
            var current = atomic.load(ordering: .relaxed)
            while current < position {
                let (exchanged, original) = atomic.compareExchange(expected: current, desired: position, ordering: .relaxed)
                if exchanged { return }
                current = original
            }
        }
        raise(lastWrite)
        if schemaChanged { raise(lastSchemaChange) }
    }

    /// Before publishing other stores' commits heard on the listener (on the primary): the
    /// primary's position now is past those commits, so the observers' reads that follow
    /// wait for a standby to replay them, as after this store's own writes.
    func noteHeardCommits(on listener: PGConnection) {
        guard hasStandbys, let position = try? Self.currentPosition(listener) else { return }
        noteCommit(at: position)
    }

    /// After a schema change committed on the writer: a standby must replay it first.
    func noteSchemaChange() {
        guard hasStandbys, let position = try? Self.currentPosition(writer) else { return }
        noteCommit(at: position, schemaChanged: true)
    }

    /// Whether `reader` may serve a read now: it is on the primary, or on a standby that
    /// has replayed what this store's reads must see, waited for up to `standbyWait`.
    /// False when the wait ran out (or the standby could not be asked): the primary serves
    /// the read.
    func standbyCaughtUp(_ reader: PGConnection) -> Bool {
        guard hasStandbys, reader.onStandby else { return true }
        let schema = lastSchemaChange.load(ordering: .relaxed)
        let target = options.consistency == .eventual ? schema : max(schema, lastWrite.load(ordering: .relaxed))
        if target <= reader.replayed { return true }
        let clock = ContinuousClock()
        let deadline = clock.now.advanced(by: options.standbyWait)
        var pause: UInt32 = 100
        while true {
            do {
                try reader.readRecoveryState()
            } catch {
                return false
            }
            if !reader.onStandby || reader.replayed >= target { return true }
            if clock.now >= deadline {
                log.logger.debug("A standby had not replayed the store's last write in time; the primary serves the read", metadata: ["depot.standby_wait": "\(options.standbyWait)"])
                return false
            }
            // Short at first: a standby that keeps up replays a commit soon after it.
            usleep(pause)
            pause = min(pause * 2, 5_000)
        }
    }
}
