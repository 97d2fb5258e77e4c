import CLibPQ
import DepotCore
import DepotSQL
import Foundation
import NIOConcurrencyHelpers

/// Changes across processes. Each write transaction sends `pg_notify(channel, payload)`
/// before its COMMIT, so PostgreSQL delivers the payload to every listening session when,
/// and only when, the transaction commits, in commit order. The payload names the sending
/// store and the changed records (entity, kind, key); a write too large for one payload
/// (PostgreSQL takes under 8,000 bytes) names only the entities it touched, which
/// observers read again. A thread of the store waits on the listener connection's socket
/// and publishes other stores' payloads into the store's `ChangeFeed`.
extension PostgresEngine {
    /// How the notifications of the store `instance` begin.
    static func payloadPrefix(instance: String) -> String { "{\"i\":" + quotedJSON(instance) }

    /// What a schema change says when it commits (see `PostgresEngine+SchemaWatch.swift`):
    /// `{"i":instance,"s":version}`. Read by this version of Depot on; a listener that does
    /// not know the `s` key finds nothing in it to publish.
    static func schemaPayload(instance: String, version: String) -> String {
        payloadPrefix(instance: instance) + ",\"s\":" + quotedJSON(version) + "}"
    }

    /// Payloads above this many bytes become a list of touched entities.
    static let payloadLimit = 7_000

    /// The statement every notification is sent with: the channel, then the payload.
    static let notifySQL = "SELECT pg_notify($1, $2)"

    /// The statement that tells other processes what a write changed, run just before its
    /// COMMIT; nil when it changed nothing.
    func notification(_ recorder: ChangeRecorder) -> PGConnection.Step? {
        guard !recorder.isEmpty else { return nil }
        return PGConnection.Step(
            sql: Self.notifySQL, params: [.text(channel), .text(Self.payload(recorder, prefix: ownPayloadPrefix))], prepare: true,
            context: "Notifying other processes of a write")
    }

    func notify(_ recorder: ChangeRecorder) throws(DepotError) {
        guard let step = notification(recorder) else { return }
        _ = try writer.run([step])
    }

    /// The notification of a write, written by hand (JSONSerialization cost more than the
    /// round trip it rides on): `{"i":instance,"c":[[entity,kind,key],...]}`, or
    /// `{"i":instance,"t":[entity,...]}` when the keys would not fit, or `"a":true` (every
    /// entity) when even the names would not.
    /// `prefix` is the sender's ``payloadPrefix(instance:)``.
    static func payload(_ recorder: ChangeRecorder, prefix: String) -> String {
        let changes = recorder.changes()
        var text = prefix
        if !changes.isEmpty {
            var list = ",\"c\":["
            for (index, change) in changes.enumerated() {
                if index > 0 { list += "," }
                list += "[" + quotedJSON(change.entity) + ",\"" + change.kind.rawValue + "\"," + quotedJSON(encode(change.key)) + "]"
                if list.utf8.count > payloadLimit { break }
            }
            list += "]}"
            if text.utf8.count + list.utf8.count <= payloadLimit { return text + list }
        }
        var touched: [String] = []
        for change in changes where !touched.contains(change.entity) { touched.append(change.entity) }
        if changes.isEmpty { touched = recorder.touchedEntities.sorted() }
        let names = ",\"t\":[" + touched.map(quotedJSON).joined(separator: ",") + "]}"
        if text.utf8.count + names.utf8.count <= payloadLimit { return text + names }
        text += ",\"a\":true}"
        return text
    }

    /// A JSON string literal.
    static func quotedJSON(_ text: String) -> String {
        // Names and keys rarely hold a character JSON escapes: then the text goes in whole.
        if !text.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") || $0 < 0x20 }) {
            return "\"" + text + "\""
        }
        var out = "\""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case _ where scalar.value < 0x20: out += String(format: "\\u%04x", scalar.value)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
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
        runtime.withLockedValue { $0 }?.publishTouched(names)
    }

    /// Publishes one received payload, unless this store sent it, through the runtime, which
    /// orders it with the store's own commits: the feed delivers commits one at a time, in
    /// order, whoever made them.
    func received(_ payload: String) {
        // This store's own writes come back too: skip them before parsing anything.
        if payload.hasPrefix(ownPayloadPrefix) { return }
        guard let data = payload.data(using: .utf8),
            let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let sender = object["i"] as? String, sender != instance
        else { return }
        if object["s"] != nil { return noteSchemaNotice() }
        if object["a"] != nil { return announceEverything() }
        if let entries = object["c"] as? [[String]] {
            var list: [Change] = []
            for entry in entries where entry.count == 3 {
                guard let kind = Change.Kind(rawValue: entry[1]), let key = Self.decode(entry[2]) else { continue }
                list.append(Change(entity: entry[0], key: key, kind: kind))
            }
            runtime.withLockedValue { $0 }?.publish(list)
        } else if let entities = object["t"] as? [String] {
            runtime.withLockedValue { $0 }?.publishTouched(entities)
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

    func start(engine: PostgresEngine) {
        let connection = self.connection
        let stopped = self.stopped
        let finished = self.finished
        let thread = Thread { [weak engine] in
            Thread.current.name = "depot.postgres.listen"
            var listened = false
            // Listening all the time, not only while observed: an observer that starts
            // between a remote commit and a late LISTEN would miss it (and announcing
            // "everything" at each LISTEN would send observers batches for no commit).
            var listening = false
            while !stopped.withLockedValue({ $0 }) {
                // A dropped connection (a server restart, a failover, a terminated backend):
                // libpq has closed its socket. Reconnect without blocking, so closing the
                // store is not held up by a server that does not answer.
                if connection.isBroken || connection.socket < 0 {
                    listening = false
                    engine?.listening.store(false, ordering: .releasing)
                    guard let handle = connection.handle, PQresetStart(handle) == 1 else {
                        usleep(500_000)
                        continue
                    }
                    var status = PGRES_POLLING_WRITING
                    while !stopped.withLockedValue({ $0 }), status != PGRES_POLLING_OK, status != PGRES_POLLING_FAILED {
                        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(status == PGRES_POLLING_READING ? POLLIN : POLLOUT), revents: 0)
                        if poll(&descriptor, 1, 100) > 0 || descriptor.fd < 0 { status = PQresetPoll(handle) }
                    }
                    if status != PGRES_POLLING_OK { usleep(200_000) }
                    continue
                }
                if !listening {
                    guard let channel = engine?.channel else { break }
                    guard (try? connection.execute("LISTEN \(quoted(channel))")) != nil else {
                        usleep(200_000)
                        continue
                    }
                    // After a reconnect: whatever other servers wrote meanwhile was not heard.
                    if listened { engine?.announceEverything() }
                    // Nor a schema change they made before the LISTEN: reads probe again
                    // until one finds the schema as the registry has it.
                    engine?.noteSchemaNotice()
                    engine?.listening.store(true, ordering: .releasing)
                    listening = true
                    listened = true
                }
                var descriptor = pollfd(fd: connection.socket, events: Int16(POLLIN), revents: 0)
                // Wakes at least every 100 ms to see whether the store is closing.
                let ready = poll(&descriptor, 1, 100)
                if ready < 0 && errno != EINTR { break }
                guard let engine else { break }
                // Also when nothing arrived: libpq may hold notifications it read already.
                let heard = connection.notifications().filter { $0.channel == engine.channel }
                if heard.contains(where: { !$0.payload.hasPrefix(engine.ownPayloadPrefix) }) { engine.noteHeardCommits(on: connection) }
                for notification in heard {
                    engine.received(notification.payload)
                }
            }
            engine?.listening.store(false, ordering: .releasing)
            finished.signal()
        }
        thread.start()
    }

    /// Stops the thread (within half a second, even while reconnecting) and closes the
    /// connection.
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
