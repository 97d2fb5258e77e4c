import DepotCore

/// A page cursor's token, which a server takes from its clients: every string gets a
/// `PageCursor` or a `DepotError`, and a cursor read from a token must write a token that
/// reads back as the same cursor.
enum CursorTarget {
    static func run(_ bytes: UnsafeRawBufferPointer) {
        let text = String(decoding: bytes, as: UTF8.self)
        let cursor: PageCursor
        do {
            cursor = try PageCursor(text)
        } catch {
            return
        }
        let token = cursor.description
        do {
            let again = try PageCursor(token)
            guard again == cursor else { violated("'\(text)' reads as a cursor whose token '\(token)' reads as another one") }
        } catch {
            violated("'\(text)' reads as a cursor, but its own token '\(token)' does not: \(error)")
        }
    }
}
