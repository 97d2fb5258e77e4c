import CLibPQ
import DepotCore
import Foundation
import NIOConcurrencyHelpers

/// Changes across processes. Each write transaction sends `pg_notify(channel, payload)`
/// before its COMMIT, so PostgreSQL delivers the payload to every listening session when,
/// and only when, the transaction commits, in commit order. The payload names the sending
/// store and the changed records (entity, kind, key); a write too large for one payload
/// (PostgreSQL takes under 8,000 bytes) names only the entities it touched, which
/// observers read again. A thread of the store waits on the listener connection's socket
/// and publishes other stores' payloads into the store's ``ChangeFeed``.
extension PostgresStore {
    /// Payloads above this many bytes become a list of touched entities.
    static let payloadLimit = 7_000

    /// The statement that tells other processes what a write changed, run just before its
    /// COMMIT; nil when it changed nothing.
    func notification(_ recorder: ChangeRecorder) -> PGConnection.Step? {
        guard !recorder.isEmpty else { return nil }
        return PGConnection.Step(
            sql: "SELECT pg_notify($1, $2)", params: [.text(channel), .text(Self.payload(recorder, instance: instance))], name: "depot_notify",
            context: "Notifying other processes of a write")
    }

    func notify(_ recorder: ChangeRecorder) throws(DepotError) {
        guard let step = notification(recorder) else { return }
        _ = try writer.run([step])
    }

    func publishLocally(_ recorder: ChangeRecorder) {
        changes.publish(recorder)
    }

    static func payload(_ recorder: ChangeRecorder, instance: String) -> String {
        let changes = recorder.changes()
        var entries: [[String]] = []
        var size = 0
        var touched: [String] = []
        for change in changes {
            let entry = [change.entity, change.kind.rawValue, encode(change.key)]
            size += entry.reduce(8) { $0 + $1.utf8.count }
            entries.append(entry)
            if !touched.contains(change.entity) { touched.append(change.entity) }
        }
        _ = size
        let touchedOnly: [String: Any] = ["i": instance, "t": changes.isEmpty ? recorder.touchedEntities.sorted() : touched]
        // Measured as sent (JSON escapes control characters into six bytes each).
        if !changes.isEmpty, let data = try? JSONSerialization.data(withJSONObject: ["i": instance, "c": entries] as [String: Any]),
            data.count <= payloadLimit
        {
            return String(decoding: data, as: UTF8.self)
        }
        if let data = try? JSONSerialization.data(withJSONObject: touchedOnly), data.count <= payloadLimit {
            return String(decoding: data, as: UTF8.self)
        }
        // Entity names too long to list: everything may have changed.
        return "{\"i\":\"\(instance)\",\"a\":true}"
    }

    static func encode(_ key: Value) -> String {
        switch key {
        case .null: "n:"
        case .int(let v): "i:\(v)"
        case .bool(let v): "b:\(v ? 1 : 0)"
        case .double(let v): "f:\(String(v.bitPattern, radix: 16))"
        case .date(let v): "t:\(String(v.timeIntervalSinceReferenceDate.bitPattern, radix: 16))"
        case .string(let s): "s:\(s)"
        case .data(let d): "d:\(d.base64EncodedString())"
        case .uuid(let u): "u:\(u.uuidString)"
        }
    }

    static func decode(_ text: String) -> Value? {
        // By bytes: a key that starts with a combining mark would join the ':' into one
        // Character.
        let bytes = Array(text.utf8)
        guard bytes.count >= 2, bytes[1] == UInt8(ascii: ":") else { return nil }
        let body = String(decoding: bytes[2...], as: UTF8.self)
        switch String(decoding: bytes[0..<2], as: UTF8.self) {
        case "n:": return .null
        case "i:": return Int64(body).map { .int($0) }
        case "b:": return .bool(body == "1")
        case "f:": return UInt64(body, radix: 16).map { .double(Double(bitPattern: $0)) }
        case "t:": return UInt64(body, radix: 16).map { .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: $0))) }
        case "s:": return .string(body)
        case "d:": return Data(base64Encoded: body).map { .data($0) }
        case "u:": return UUID(uuidString: body).map { .uuid($0) }
        default: return nil
        }
    }

    /// Tells observers that every entity may have changed (after the listener lost its
    /// connection, or a payload that could not list them).
    func announceEverything() {
        let names = tables.names
        writerLane.submit { self.changes.publishTouched(names) }
    }

    /// Publishes one received payload, unless this store sent it, on the writer's lane:
    /// the feed delivers commits one at a time, in order, whoever made them.
    func received(_ payload: String) {
        guard let data = payload.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let sender = object["i"] as? String, sender != instance
        else { return }
        if object["a"] != nil { return announceEverything() }
        if let entries = object["c"] as? [[String]] {
            var list: [Change] = []
            for entry in entries where entry.count == 3 {
                guard let kind = Change.Kind(rawValue: entry[1]), let key = Self.decode(entry[2]) else { continue }
                list.append(Change(entity: entry[0], key: key, kind: kind))
            }
            let changes = list
            writerLane.submit { self.changes.publish(changes) }
        } else if let entities = object["t"] as? [String] {
            writerLane.submit { self.changes.publishTouched(entities) }
        }
    }
}

/// The thread that waits for notifications on the listener connection.
final class ChangeListener: Sendable {
    private let connection: PGConnection
    private let stopped = NIOLockedValueBox(false)
    private let finished = DispatchSemaphore(value: 0)

    init(connection: PGConnection) {
        self.connection = connection
    }

    func start(store: PostgresStore) {
        let connection = self.connection
        let stopped = self.stopped
        let finished = self.finished
        let thread = Thread { [weak store] in
            Thread.current.name = "depot.postgres.listen"
            while !stopped.withLockedValue({ $0 }) {
                // A dropped connection (a server restart, a failover, a terminated backend):
                // libpq has closed its socket. Reconnect, listen again, and tell observers
                // that anything may have changed meanwhile.
                if connection.isBroken || connection.socket < 0 {
                    guard let handle = connection.handle, let channel = store?.channel else { break }
                    PQreset(handle)
                    if !connection.isBroken, (try? connection.execute("LISTEN \(quoted(channel))")) != nil {
                        store?.announceEverything()
                    } else {
                        usleep(500_000)
                    }
                    continue
                }
                var descriptor = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
                // Wakes at least every 100 ms to see whether the store is closing.
                let ready = poll(&descriptor, 1, 100)
                if ready < 0 && errno != EINTR { break }
                guard let store else { break }
                // Also when nothing arrived: libpq may hold notifications it read already.
                for notification in connection.notifications() where notification.channel == store.channel {
                    store.received(notification.payload)
                }
            }
            finished.signal()
        }
        thread.start()
    }

    /// Stops the thread (within 100 ms) and closes the connection.
    func stop() {
        let first = stopped.withLockedValue { stopped -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        finished.wait()
        connection.close()
    }
}
