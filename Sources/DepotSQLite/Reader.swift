import CSQLite
import DepotCore
import Foundation
import NIOConcurrencyHelpers

// A reader connection of the store's `ReaderPool`, used on the store's concurrent read
// queue.
extension SQLiteStore {
    /// A reader connection. Only the read that checked it out uses it, on whichever thread
    /// of the read queue runs that read (the pool's lock orders one user after the next).
    final class Reader: Sendable {
        let connection: Connection

        init(connection: Connection) {
            self.connection = connection
        }
    }
}
