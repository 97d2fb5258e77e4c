import CSQLite
import DepotCore
import Logging

/// Holds the log for SQLite's statement-trace callback, which is a C function and can only
/// reach Swift state through a context pointer.
final class TraceContext {
    let log: StoreLog
    init(log: StoreLog) { self.log = log }
}

extension Connection {
    /// Logs every statement SQLite runs on this connection at `trace`, with its bound values
    /// expanded, through SQLite's own trace hook; nothing is registered (and nothing costs)
    /// unless the logger is at `trace`.
    func traceStatements(to log: StoreLog) {
        guard log.tracing, let handle else { return }
        let context = TraceContext(log: log)
        traceContext = context
        let pointer = Unmanaged.passUnretained(context).toOpaque()
        sqlite3_trace_v2(handle, UInt32(SQLITE_TRACE_STMT), { _, context, statement, _ in
            guard let context, let statement else { return 0 }
            let trace = Unmanaged<TraceContext>.fromOpaque(context).takeUnretainedValue()
            let statementHandle = OpaquePointer(statement)
            let text: String
            if let expanded = sqlite3_expanded_sql(statementHandle) {
                text = String(cString: expanded)
                sqlite3_free(expanded)
            } else if let plain = sqlite3_sql(statementHandle) {
                text = String(cString: plain)
            } else {
                return 0
            }
            trace.log.trace("SQL", ["depot.sql": .string(text)])
            return 0
        }, pointer)
    }
}
