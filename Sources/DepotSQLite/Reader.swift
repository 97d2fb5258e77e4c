import DepotCore
import NIOConcurrencyHelpers

extension SQLiteEngine {
    /// A reader connection, handed to one read at a time by the store runtime's pool; the
    /// read uses it on whichever thread runs it (the pool's lock orders one user after the
    /// next).
    public final class Reader: Sendable {
        let connection: Connection
        /// Whether a read has the connection now; see ``KeptSnapshots``.
        let use = NIOLockedValueBox(KeptSnapshots.Use())

        init(connection: Connection) {
            self.connection = connection
        }
    }
}
