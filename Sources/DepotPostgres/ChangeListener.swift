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
        let object: [String: Any] = changes.isEmpty || size > payloadLimit
            ? ["i": instance, "t": changes.isEmpty ? recorder.touchedEntities.sorted() : touched]
            : ["i": instance, "c": entries]
        guard let data = try? JSONSerialization.data(withJSONObject: object) else { return "{\"i\":\"\(instance)\",\"t\":[]}" }
        return String(decoding: data, as: UTF8.self)
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
        guard text.count >= 2 else { return nil }
        let body = String(text.dropFirst(2))
        switch text.prefix(2) {
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

    /// Publishes one received payload, unless this store sent it.
    func received(_ payload: String) {
        guard let data = payload.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let sender = object["i"] as? String, sender != instance
        else { return }
        if let entries = object["c"] as? [[String]] {
            var list: [Change] = []
            for entry in entries where entry.count == 3 {
                guard let kind = Change.Kind(rawValue: entry[1]), let key = Self.decode(entry[2]) else { continue }
                list.append(Change(entity: entry[0], key: key, kind: kind))
            }
            changes.publish(list)
        } else if let entities = object["t"] as? [String] {
            changes.publishTouched(entities)
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
                var descriptor = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
                // Wakes at least every 100 ms to see whether the store is closing.
                let ready = poll(&descriptor, 1, 100)
                if ready < 0 && errno != EINTR { break }
                if ready <= 0 { continue }
                guard let store else { break }
                if connection.isBroken {
                    if let handle = connection.handle {
                        PQreset(handle)
                        try? connection.execute("LISTEN \(quoted(store.channel))")
                    }
                    continue
                }
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
